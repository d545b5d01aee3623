// OPFS weight store (runs in the worker). Layout under the origin's private file system:
//   exactspec/models/<name>/meta.json   written LAST: a model exists only when its meta.json does
//   exactspec/models/<name>/<files>     model.gguf, or config.json + *.safetensors + tokenizer.json (HF folder)
// An import that fails (network, quota, sha256, validation) removes its folder: no half file is left behind.
// Folders without meta.json (an import cut short by a closed tab) are swept on open().
// files(name, {verify: true}) checks every file's sha256 against the one recorded at import (once per worker for an
// unchanged file): a damaged stored file is refused (StoreError code 'damaged') so the page can offer a re-import.
// Fault injection (app/faults.js, off unless armed): store.faults.take('opfs_write' | 'opfs_read', 'load').

import { Sha256 } from './sha256.js';

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const CHUNK = 1 << 20;

export class StoreError extends Error {
  constructor(message, { code = null, model = null } = {}) {
    super(message);
    this.code = code;         // 'damaged' | 'quota' | 'locked' | null
    this.model = model;
  }
}

export function modelNameFrom(fileName) {
  const stem = String(fileName).replace(/\.(gguf|safetensors)$/i, '');
  const clean = stem.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 100);
  return clean || 'model';
}

export class WeightStore {
  constructor(root) {
    this.root = root;
    this.faults = null;         // app/faults.js WorkerFaults, when the worker has one
    this.verified = new Map();  // `${name}/${file}` -> `${size}:${lastModified}` of a file whose sha256 was checked
  }

  static async open() {
    if (!navigator.storage || !navigator.storage.getDirectory) {
      throw new StoreError('this browser has no Origin Private File System (OPFS): cannot store model weights');
    }
    const opfs = await navigator.storage.getDirectory();
    const top = await opfs.getDirectoryHandle('exactspec', { create: true });
    const root = await top.getDirectoryHandle('models', { create: true });
    const store = new WeightStore(root);
    await store.sweep();
    return store;
  }

  async sweep() {
    for await (const [name, h] of this.root.entries()) {
      if (h.kind !== 'directory') { await this.root.removeEntry(name).catch(() => {}); continue; }
      if (!(await this._meta(h))) await this.root.removeEntry(name, { recursive: true }).catch(() => {});
    }
  }

  async _meta(dir) {
    try {
      const f = await (await dir.getFileHandle('meta.json')).getFile();
      return JSON.parse(await f.text());
    } catch (e) {
      return null;
    }
  }

  async list() {
    const out = [];
    for await (const [, h] of this.root.entries()) {
      if (h.kind !== 'directory') continue;
      const m = await this._meta(h);
      if (m) out.push(m);
    }
    out.sort((a, b) => a.name.localeCompare(b.name));
    return out;
  }

  async get(name) {
    checkName(name);
    try {
      return await this._meta(await this.root.getDirectoryHandle(name));
    } catch (e) {
      return null;
    }
  }

  // The File objects of a stored model, for WORKERFS: [{file, name}] (main file first). verify: check each file's
  // sha256 against the one recorded at import (skipped for a file checked before and unchanged since).
  async files(name, { verify = false } = {}) {
    const meta = await this.get(name);
    if (!meta) throw new StoreError(`no model named ${name} in the store`);
    const dir = await this.root.getDirectoryHandle(name);
    const out = [];
    for (const f of meta.files) {
      let file;
      try {
        file = await (await dir.getFileHandle(f.file)).getFile();
      } catch (e) {
        throw new StoreError(`${name}: stored file ${f.file} is missing: delete the model and import it again`);
      }
      if (file.size !== f.size) {
        throw new StoreError(`${name}: stored file ${f.file} is damaged (${file.size} bytes, expected ${f.size}): ` +
          'import it again', { code: 'damaged', model: name });
      }
      if (verify && this.faults && this.faults.take('opfs_read', 'load', `${name}/${f.file}`)) {
        const { damaged } = await import('../faults.js');
        file = await damaged(file);          // reads back with one byte changed
        this.verified.delete(`${name}/${f.file}`);
      }
      if (verify && f.sha256) {
        const key = `${name}/${f.file}`, stamp = `${file.size}:${file.lastModified}`;
        if (this.verified.get(key) !== stamp) {
          const got = await sha256Hex(file);
          if (got !== f.sha256) {
            throw new StoreError(`${name}: stored file ${f.file} is damaged (its sha256 no longer matches the one ` +
              'recorded at import): import it again', { code: 'damaged', model: name });
          }
          if (file instanceof File) this.verified.set(key, stamp);
        }
      }
      out.push(file);
    }
    return { meta, files: out };
  }

  // True when every file of the model is present with its recorded size (cheap; no hashing).
  async intact(name) {
    try {
      await this.files(name);
      return true;
    } catch (e) {
      return false;
    }
  }

  async delete(name) {
    checkName(name);
    try {
      await this.root.removeEntry(name, { recursive: true });
      return true;
    } catch (e) {
      if (e.name === 'NotFoundError') return false;
      throw e;
    }
  }

  async checkQuota(bytes) {
    if (!bytes || !navigator.storage.estimate) return;
    const { usage = 0, quota = Infinity } = await navigator.storage.estimate();
    const free = quota - usage;
    if (bytes * 1.05 + (1 << 20) > free) {
      throw new StoreError(`not enough storage for ${fmtBytes(bytes)}: ${fmtBytes(free)} free of this site's quota ` +
        `(${fmtBytes(quota)}); delete a model first`, { code: 'quota' });
    }
  }

  // "X free of Y" from the browser's estimate, or '' where it gives none.
  async quotaText() {
    try {
      const { usage = 0, quota } = await navigator.storage.estimate();
      return Number.isFinite(quota) ? `${fmtBytes(Math.max(0, quota - usage))} free of this site's ${fmtBytes(quota)} quota` : '';
    } catch (e) {
      return '';
    }
  }

  // Import a model from sources: [{file: 'model.gguf', size?, sha256?, read: async function*() -> Uint8Array chunks}].
  // meta: {name, role, source, format}. validate(dirFiles) -> may throw (the folder is removed then).
  // onProgress({loaded, total}). Returns the meta written.
  async importSources(meta, sources, { validate, onProgress } = {}) {
    const name = checkName(meta.name);
    if (await this.get(name)) throw new StoreError(`a model named ${name} already exists: delete it first`);
    await this.root.removeEntry(name, { recursive: true }).catch(() => {});
    const total = sources.reduce((s, x) => s + (x.size || 0), 0);
    await this.checkQuota(total);
    const dir = await this.root.getDirectoryHandle(name, { create: true });
    const written = [];
    let loaded = 0, lastReport = 0;
    try {
      for (const src of sources) {
        const fh = await dir.getFileHandle(src.file, { create: true });
        const access = await fh.createSyncAccessHandle();
        const sha = new Sha256();
        let off = 0;
        try {
          access.truncate(0);
          for await (const chunk of src.read()) {
            if (src.size && off + chunk.length > src.size) {
              throw new StoreError(`${src.file}: more bytes than the expected ${src.size}`);
            }
            // an armed opfs_write fault: half of this chunk is written, then the write fails as a full quota would
            // (a partial file exists, which the failure must remove)
            if (this.faults && this.faults.take('opfs_write', 'load', `${name}/${src.file}`)) {
              access.write(chunk.subarray(0, chunk.length >> 1), { at: off });
              access.flush();
              throw new DOMException('injected: the storage quota is exceeded', 'QuotaExceededError');
            }
            let w = 0;
            while (w < chunk.length) w += access.write(chunk.subarray(w), { at: off + w });
            sha.update(chunk);
            off += chunk.length; loaded += chunk.length;
            const now = Date.now();
            if (onProgress && now - lastReport > 100) { lastReport = now; onProgress({ loaded, total }); }
          }
          access.flush();
        } finally {
          access.close();
        }
        const digest = sha.hex();
        if (src.size && off !== src.size) {
          throw new StoreError(`${src.file}: got ${off} bytes, expected ${src.size} (truncated download?)`);
        }
        if (src.sha256 && digest !== src.sha256) {
          throw new StoreError(`${src.file}: sha256 ${digest} does not match the expected ${src.sha256}`);
        }
        written.push({ file: src.file, size: off, sha256: digest });
      }
      if (onProgress) onProgress({ loaded, total: total || loaded });
      const full = {
        ...meta, name, files: written, size: written.reduce((s, f) => s + f.size, 0),
        sha256: written[0] ? written[0].sha256 : '', imported_at: new Date().toISOString(),
      };
      if (validate) {
        const files = [];
        for (const f of written) files.push(await (await dir.getFileHandle(f.file)).getFile());
        Object.assign(full, (await validate(full, files)) || {});
      }
      const mh = await dir.getFileHandle('meta.json', { create: true });
      const acc = await mh.createSyncAccessHandle();
      try {
        const bytes = new TextEncoder().encode(JSON.stringify(full));
        acc.truncate(0); acc.write(bytes, { at: 0 }); acc.flush();
      } finally {
        acc.close();
      }
      return full;
    } catch (e) {
      await this.root.removeEntry(name, { recursive: true }).catch(() => {});
      if (e && e.name === 'QuotaExceededError') {
        const q = await this.quotaText();
        throw new StoreError(`storage quota exceeded while importing ${name} (${fmtBytes(total || loaded)}` +
          `${q ? `; ${q}` : ''}): the partial file was removed and every stored model is intact; delete a model ` +
          'or free space, then import again', { code: 'quota', model: name });
      }
      if (e && e.name === 'NoModificationAllowedError') {
        throw new StoreError(`cannot write ${name}: another tab of this site holds the file open (close it and try ` +
          'again); the partial file was removed and every stored model is intact', { code: 'locked', model: name });
      }
      throw e;
    }
  }
}

export function checkName(name) {
  if (typeof name !== 'string' || !NAME_RE.test(name) || name.endsWith('.part')) {
    throw new StoreError(`invalid model name ${JSON.stringify(name)}: use letters, digits, '.', '_' or '-' (max 100)`);
  }
  return name;
}

// Hex sha256 of a Blob: WebCrypto for files that fit in memory at once, the streaming JS hash beyond.
export async function sha256Hex(blob) {
  if (blob.size <= (512 << 20) && globalThis.crypto && crypto.subtle) {
    const d = new Uint8Array(await crypto.subtle.digest('SHA-256', await blob.arrayBuffer()));
    return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
  }
  const h = new Sha256();
  for await (const c of readBlob(blob)) h.update(c);
  return h.hex();
}

export async function* readResponse(resp) {
  const reader = resp.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    yield value;
  }
}

export async function* readBlob(blob) {
  for (let off = 0; off < blob.size; off += CHUNK) {
    yield new Uint8Array(await blob.slice(off, Math.min(blob.size, off + CHUNK)).arrayBuffer());
  }
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return 'unlimited';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}
