"""rw-01 through the decode loop on the CPU reference behind a device on a clock (a pass 1, a verify 1.7, a hinted run
queued while the loop streams): the champion alone, the n-gram forced and "only while it pays" (README, the
H200 section of 2026-12-04d).   python bench/results/ngram/rw01_replay.py rw-01   (needs .cache/ngram-bench from
`python build.py bench ngram_tau`)"""
import asyncio, json, sys
sys.path.insert(0, 'py'); sys.path.insert(0, 'tests')
from exactspec.backend import RunsAhead
from exactspec.reference import ReferenceModel
from exactspec.decode import GenerateConfig, generate_async
from test_batched import QueuedDevice
pid = sys.argv[1]
rec = json.load(open(f'.cache/ngram-bench/{pid}_64.json'))
EOS = rec['y'][-1]
class Dev(QueuedDevice):
    def __init__(self, inner):
        RunsAhead.__init__(self, inner, 4)
        self.t, self.queued = 0.0, 0
    def verify(self, *a, **k):            # a verify round: about 1.7 passes (H200: 1.9 ms against 1.1)
        self.t += 1.7
        return self.inner.verify(*a, **k) if hasattr(self.inner, 'verify') else None
champ = ReferenceModel.from_file('static/models/smollm2-135m-instruct-q4_1.gguf', max_len=4096)
for drafter, adaptive in (("none", False), ("ngram", False), ("ngram", True)):
    champ.truncate(0)
    dev = Dev(champ)
    cfg = GenerateConfig(max_new_tokens=64, k=4 if drafter == "ngram" else 0, drafter=drafter, adaptive=adaptive, temperature=0.0)
    r = asyncio.run(generate_async(dev, rec['prompt'], cfg, on_tokens=dev.streamed, clock=dev.clock, eos_ids=[EOS]))
    st = {k: r.stats[k] for k in ('submissions','ahead_passes','wasted_passes','proposed','accepted','spec_disabled_rounds')}
    print(pid, drafter, 'adaptive' if adaptive else 'forced', 'clock', dev.t, 'queued at the end', dev.queued, st)
    print('   calls', [(c[1], c[2], c[3]) for c in dev.calls][-5:])
