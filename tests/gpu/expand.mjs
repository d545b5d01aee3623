// expand.mjs — print WGSL kernels as the engine compiles them (app/gpu/wgsl.js), for tests and for reading:
//   node tests/gpu/expand.mjs NAME [DEFINES_JSON]        the expanded text of shaders/NAME.wgsl
//   node tests/gpu/expand.mjs --json '[[NAME, DEFINES], ...]' [SHADER_DIR]   one JSON line: [{name, defines, text} | {error}]
import { pathToFileURL } from 'node:url';
import { defaultShaderSource } from '../../app/gpu/kernels.js';
import { cachedLoader, expandWgsl } from '../../app/gpu/wgsl.js';

const args = process.argv.slice(2);
const dir = args[0] === '--json' ? args[2] : undefined;
const load = cachedLoader(defaultShaderSource(dir ? pathToFileURL(`${dir}/`) : new URL('../../shaders/', import.meta.url)));
if (args[0] === '--json') {
  const out = [];
  for (const [name, defines] of JSON.parse(args[1])) {
    try {
      out.push({ name, defines, text: (await expandWgsl(name, load, defines ?? {})).text });
    } catch (e) {
      out.push({ name, defines, error: e.message });
    }
  }
  console.log(JSON.stringify(out));
} else {
  process.stdout.write((await expandWgsl(args[0], load, JSON.parse(args[1] ?? '{}'))).text + '\n');
}
