"""Per setting (drafter, "only while it pays") of a product_sides.sh call: each side NAME's time per prompt over the
BASE name's (the median over that name's sides and runs of the prompt's elapsed_ms, as the product's loop reports it,
divided by BASE's), median over the prompts with the quartiles. Robust to a host whose load changes from side to side
only as far as the sides alternate. Usage: python bench/h200/results/2026-12-06e/per_prompt.py BASE SIDES_DIR [...]
(an unpacked callN/sides.tgz; several folders pooled)"""
import json, glob, re, collections, statistics as st, sys
base, folders = sys.argv[1], sys.argv[2:]
el = collections.defaultdict(lambda: collections.defaultdict(list))
for f in [p for d in folders for p in glob.glob(d + '/product_*.json')]:
    name = re.search(r'product_\d+_(.+)\.json', f)[1]
    for r in json.load(open(f))['records']:
        key = (r['drafter'], r.get('adaptive'))
        el[(key, r['prompt_id'])][name].append(r['elapsed_ms'])
names = sorted({n for v in el.values() for n in v})
for key in sorted({k for k, _ in el}):
    print(key)
    ratios = collections.defaultdict(list)
    for (k, pid), d in sorted(el.items()):
        if k != key: continue
        b = st.median(d[base])
        for n in names:
            if n != base: ratios[n].append(st.median(d[n]) / b)
    for n, r in ratios.items():
        print(f"   {n} / {base}: time per prompt, median over {len(r)} prompts {st.median(r):.3f} [q1 {sorted(r)[len(r)//4]:.3f} q3 {sorted(r)[3*len(r)//4]:.3f}]")
