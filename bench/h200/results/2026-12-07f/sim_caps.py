"""The n-gram chain's rounds replayed over call 11's own greedy answers (side 1, run 0: the champion alone's, the same
for every drafter) under proposal-cap policies: a fixed k (4, 6, 8); `grow` (lo at a copy's start, hi after a round
whose proposals were all accepted); `ext` (hi where the suffix match at the chosen occurrence extends M or more tokens
back, else lo); `sticky` (after a round accepted in full, copy on from where its proposals came from, with hi).
Proposals are the shipped lookup's (py/exactspec/drafters/ngram.py: suffixes of 3 then 2 tokens, the most recent
occurrence), at most 3 a round from position 1,024 on, as chains make them; a round's cost is the GPU time of its rows
on the H100 (call 3: T_verify(rows - 1) at position 64; an empty round 0.982 ms), the champion alone a pass running
ahead (0.951 ms). Host time is not modelled: over-predicts the measured speedups (k = 4 1.345 here against 1.271
measured), and got k = 6's direction on adversarial wrong (+2.5% here, -5% measured); a coarse guide, not a figure.
Usage (repository root, after `python build.py setup` for the champion's tokenizer):
  tar -xzf bench/h200/results/2026-12-07f/call11/ks/sides.tgz -C /tmp/ks
  python3 bench/h200/results/2026-12-07f/sim_caps.py /tmp/ks/sides"""
import json, sys, glob, math, statistics as st
from collections import defaultdict
sys.path.insert(0, 'py')
from exactspec.tokenizer import Tokenizer
from exactspec.chat import encode_chat, default_system_prompt
from exactspec.drafters.ngram import NgramDrafter
tok = Tokenizer.from_gguf('static/models/smollm2-135m-instruct-q4_1.gguf')
ds = default_system_prompt(getattr(tok, 'chat_template', None))
W = {json.loads(l)['id']: json.loads(l) for l in open('tests/data/workload.jsonl')}
VER = [None, 1.0, 0.985, 1.100, 1.113, 1.242, 1.388, 1.403, 1.456, 1.763]   # rows -> GPU ms (T_verify(rows-1))
EMPTY = 0.982   # an empty chain round (k = 3/4; ~0.989)
PLAIN = 0.951   # a pass running ahead (the champion alone)

SHIPPED = NgramDrafter()


def lookup(seq, k, maxn=3, minn=2):
    """The shipped lookup's proposals (up to k; checked equal to NgramDrafter.lookup's), where they start in seq, and
    how far back its suffix match reaches (which NgramDrafter does not report)."""
    cont, src, ext = _lookup(seq, k, maxn, minn)
    assert cont == SHIPPED.lookup(seq, k)
    return cont, src, ext


def _lookup(seq, k, maxn, minn):
    L = len(seq)
    for n in range(min(maxn, L - 1), minn - 1, -1):
        pat = seq[L - n:]
        for i in range(L - n - 1, -1, -1):
            if seq[i:i + n] == pat:
                cont = seq[i + n:i + n + k]
                if cont:
                    e = 0
                    while e < 32 and i - e - 1 >= 0 and seq[i - e - 1] == seq[L - n - e - 1]:
                        e += 1
                    return cont, i + n, n + e
    return [], None, 0


def replay(prompt, answer, propose):
    """Speedup over the champion alone of chain rounds whose proposals propose(seq, last) makes (last: the round
    before's {'full': every proposal accepted, 'next': where its copy would go on}) -> (proposals, their source)."""
    seq, pos, cost, last = list(prompt), 0, 0.0, {'full': False, 'next': None}
    while pos < len(answer):
        props, src = propose(seq, last)
        if len(seq) >= 1024:
            props = props[:3]
        a = 0
        while a < len(props) and pos + a < len(answer) and props[a] == answer[pos + a]:
            a += 1
        c = len(props)
        cost += EMPTY if c == 0 else VER[1 + c]
        emit = min(a + 1, len(answer) - pos)
        seq += answer[pos:pos + emit]
        pos += emit
        full = c > 0 and a == c
        last = {'full': full, 'next': src + c + 1 if full and src is not None else None}
    return len(answer) * PLAIN / cost


def capped(cap):
    """The shipped lookup with the cap cap(last, extent) on its proposals."""
    def propose(seq, last):
        props, src, ext = lookup(seq, 64)
        return props[:cap(last, ext)], src
    return propose


def sticky(lo, hi):
    """After a round accepted in full, copy on from where its proposals came from (hi of them); else the lookup (lo)."""
    def propose(seq, last):
        if last['full'] and last['next'] is not None and last['next'] < len(seq):
            return seq[last['next']:last['next'] + hi], last['next']
        props, src, _ = lookup(seq, lo)
        return props, src
    return propose


def fixed(k):
    return capped(lambda last, ext: k)


def grow(lo, hi):
    return capped(lambda last, ext: hi if last['full'] else lo)


def extent(lo, hi, M):
    return capped(lambda last, ext: hi if ext >= M else lo)


f = sorted(glob.glob(sys.argv[1] + '/product_1_A.json'))[0]
recs = [r for r in json.load(open(f))['records'] if r['drafter'] == 'none' and r['run'] == 0]
pols = {'k4': fixed(4), 'k6': fixed(6), 'k8': fixed(8), 'grow4-6': grow(4, 6), 'grow4-8': grow(4, 8), 'grow3-6': grow(3, 6),
        'ext4-6 M5': extent(4, 6, 5), 'ext4-6 M8': extent(4, 6, 8), 'ext4-8 M8': extent(4, 8, 8), 'ext3-6 M6': extent(3, 6, 6)}
pols = {**pols, 'sticky4-4': sticky(4, 4), 'sticky4-6': sticky(4, 6), 'sticky4-8': sticky(4, 8)}
by = defaultdict(lambda: defaultdict(list))
for r in recs:
    prompt = encode_chat(tok, W[r['prompt_id']]['messages'], default_system=ds)
    for name, p in pols.items():
        by[name][r['stratum']].append(replay(prompt, r['token_ids'], p))
strata = sorted(by['k4'])
print('policy'.ljust(12), 'geo'.rjust(6), ' '.join(s[:8].rjust(8) for s in strata))
for name in pols:
    med = {s: st.median(by[name][s]) for s in strata}
    geo = math.exp(sum(math.log(v) for v in med.values()) / len(med))
    print(name.ljust(12), f'{geo:6.3f}', ' '.join(f'{med[s]:8.2f}' for s in strata))
