"""Print (a T_single of a process's first run may be cold: compare the GPU ms)
 verify_rows.json (bench/h200/verify_rows.sh) as a table: per variant and round, GPU ms of T_single and
T_verify(k), k = 1..8, and the 5-row minus 1-row GPU us of the qkv and FFN dispatches."""
import gzip, json, sys
p = sys.argv[1]
op = gzip.open if p.endswith(".gz") else open
rows = [json.loads(l) for l in op(p, "rt") if l.strip()]
print("| variant | round | T_single | T_verify(k), k = 1..8 (GPU ms) | T_verify(4)/T_single | T_verify(8)/T_single | qkv / FFN 5 rows - 1 row (us) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r.get("ablation"):
        continue
    res = r["result"]
    ts = res["single"]["gpu"]
    v = res.get("verify", {})
    tv = [v[str(k)]["gpu"] for k in range(1, 9) if str(k) in v]
    def kind(n, name):
        return (res.get(f"profile_n{n}_pos64") or {}).get(name)
    extra = ""
    q1, q5, f1, f5 = kind(1, "qkv"), kind(5, "qkv"), kind(1, "ffn"), kind(5, "ffn")
    if None not in (q1, q5, f1, f5):
        extra = f"{q5 - q1:.0f} / {f5 - f1:.0f}"
    print(f"| {r['variant']} | {r['round']} | {ts:.3f} | {' / '.join(f'{x:.3f}' for x in tv)} | "
          f"{tv[3] / ts:.2f} | {tv[7] / ts:.2f} | {extra} |")
