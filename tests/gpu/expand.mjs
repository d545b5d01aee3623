// expand.mjs — WGSL kernels as the engine compiles them (app/gpu/wgsl.js), for tests and for reading:
//   node tests/gpu/expand.mjs NAME [DEFINES_JSON]     print the expanded text of shaders/NAME.wgsl
//   node tests/gpu/expand.mjs --kernels               one JSON line: [[file, defines], ...] every kernel variant the
//                                                     engine compiles (kernels.js kernelFiles, all option sets,
//                                                     blockKernelFiles: attnBlock's, headKernelFiles: a draft head's)
//   node tests/gpu/expand.mjs --json VARIANTS [DIR]   one JSON line: [{name, defines, text, origin} | {.., error}] for
//                                                     VARIANTS = '[[NAME, DEFINES], ...]', files from DIR (default shaders/)
import { pathToFileURL } from 'node:url';
import { blockKernelFiles, defaultShaderSource, headKernelFiles, kernelFiles } from '../../app/gpu/kernels.js';
import { cachedLoader, expandWgsl } from '../../app/gpu/wgsl.js';

const args = process.argv.slice(2);
const dir = args[0] === '--json' ? args[2] : undefined;
const load = cachedLoader(defaultShaderSource(dir ? pathToFileURL(`${dir}/`) : new URL('../../shaders/', import.meta.url)));

if (args[0] === '--kernels') {
  const seen = new Map();
  const sets = [false, true].flatMap((subgroups) => [false, true].map((fuse) => kernelFiles({ subgroups, fuse, qkvAttn: fuse })));
  for (const { files, defines } of [...sets, blockKernelFiles(), headKernelFiles()]) {
    for (const [k, file] of Object.entries(files)) {
      const v = [file, defines[k] ?? {}];
      seen.set(JSON.stringify(v), v);
    }
  }
  console.log(JSON.stringify([...seen.values()]));
} else if (args[0] === '--json') {
  const out = [];
  for (const [name, defines] of JSON.parse(args[1])) {
    try {
      out.push({ name, defines, ...(await expandWgsl(name, load, defines ?? {})) });
    } catch (e) {
      out.push({ name, defines, error: e.message });
    }
  }
  console.log(JSON.stringify(out));
} else {
  process.stdout.write(`${(await expandWgsl(args[0], load, JSON.parse(args[1] ?? '{}'))).text}\n`);
}
