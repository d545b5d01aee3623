"""Per setting (drafter, "only while it pays") of product_sides.sh's sides: each side NAME's time per prompt over the
BASE name's (the median over that name's sides and runs of the prompt's elapsed_ms, as the product's loop reports it,
divided by BASE's), median over the prompts with the quartiles. Robust to a host whose load changes from side to side
only as far as the sides alternate (product_sides.sh prints it with its first side's name as BASE).
    python bench/h200/sides_per_prompt.py BASE DIR [DIR ...]   (DIR: product_<i>_<name>.json; several pooled)"""
import collections
import glob
import json
import re
import statistics as st
import sys


def main(base, folders):
    el = collections.defaultdict(lambda: collections.defaultdict(list))   # (setting, prompt) -> name -> elapsed_ms
    for f in [p for d in folders for p in glob.glob(d + "/product_*.json")]:
        name = re.search(r"product_\d+_(.+)\.json", f)[1]
        for r in json.load(open(f))["records"]:
            el[((r["drafter"], r.get("adaptive")), r["prompt_id"])][name].append(r["elapsed_ms"])
    names = sorted({n for v in el.values() for n in v})
    if base not in names:
        print(f"sides_per_prompt: no side named {base} in {' '.join(folders)}")
        return
    for key in sorted({k for k, _ in el}):
        print(f"{key[0]}{' only while it pays' if key[1] else ''}: time per prompt over {base}'s")
        ratios = collections.defaultdict(list)
        for (k, pid), d in sorted(el.items()):
            if k == key and d.get(base):
                for n in names:
                    if n != base and d.get(n):
                        ratios[n].append(st.median(d[n]) / st.median(d[base]))
        for n, r in ratios.items():
            q = sorted(r)
            print(f"   {n}: median over {len(r)} prompts {st.median(r):.3f} [quartiles {q[len(q) // 4]:.3f}-"
                  f"{q[3 * len(q) // 4]:.3f}]")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
