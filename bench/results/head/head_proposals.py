"""What the shipped draft head proposes where it fails (k = 1, greedy, the CPU reference, the real decode loop):

    python bench/results/head/head_proposals.py rep-01 ml-09 adv-08 chat-08     (from the repository root; needs the
    greedy answers cached by `python build.py bench ngram_tau` in .cache/ngram-bench)

Prints, per prompt, the proposals the head made next to the tokens the champion emitted there."""
import json, sys
sys.path.insert(0, 'py')
import numpy as np
from exactspec.reference import ReferenceModel
from exactspec.drafters.head import HeadModel, HeadDrafter
from exactspec.decode import GenerateConfig, generate
from exactspec.tokenizer import Tokenizer
tok = Tokenizer.from_gguf("static/models/smollm2-135m-instruct-q4_1.gguf")
champ = ReferenceModel.from_file('static/models/smollm2-135m-instruct-q4_1.gguf', max_len=4096, keep_features=True)
head = HeadModel.from_file('static/models/head-smollm2.gguf', champ)
log = []
orig = HeadDrafter.propose
async def propose(self, seq, k, pick):
    p, q = await orig(self, seq, k, pick)
    log.append((len(seq), p, seq[-1]))
    return p, q
HeadDrafter.propose = propose
for pid in sys.argv[1:]:
    rec = json.load(open(f'.cache/ngram-bench/{pid}_64.json'))      # (prompt ids, greedy answer)
    prompt, y = rec['prompt'], rec['y']
    champ.truncate(0); head.truncate(0); log.clear()
    r = generate(champ, prompt, GenerateConfig(max_new_tokens=rec['max_new'], k=1, drafter="head", adaptive=False,
                 temperature=0.0, batched=False, head_copy=False), draft=head, eos_ids=[2])
    full = prompt + r.token_ids + [2]
    pairs = [(tok.decode([full[n]]), tok.decode(p)) for n, p, _ in log if n < len(full)]
    hits = sum(1 for n, p, _ in log if n < len(full) and p and p[0] == full[n])
    echo = sum(1 for n, p, last in log if p and p[0] == last)      # the token it was given, proposed again
    print(pid, 'k=1 rounds', len(log), 'hits', hits, 'proposed the token it was given', echo, 'tau', r.stats.get('tau'))
    print('  (truth, proposal):', pairs[:20])
