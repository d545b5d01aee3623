import json,statistics as st,collections,sys
def calls_of(f):
    recs=[json.loads(l) for l in open(f)]
    calls=[];cur=None
    for r in recs:
        if r['ev']=='call':
            cur={'kind':r['kind'],'t':r['t'],'ev':[]}; calls.append(cur)
        elif cur is not None: cur['ev'].append(r)
    return calls
agg=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for c in calls_of(f):
        ret=[e for e in c['ev'] if e['ev']=='ret']; subs=[e for e in c['ev'] if e['ev']=='submit']; maps=[e for e in c['ev'] if e['ev']=='mapped']
        if not ret or c['kind']=='forward': continue
        cont=ret[0].get('continued')
        if not cont and len(subs)==2 and maps:       # fresh run, then its continuation submitted after the readback
            key=(c['kind'],'fresh+cont', subs[0].get('pre'))
            a=agg[key]
            a['call->submit'].append(subs[0]['t']-c['t'])
            a['submit->mapped'].append(maps[0]['t']-subs[0]['t'])
            a['mapped->cont submitted'].append(subs[1]['t']-maps[0]['t'])
            a['cont submitted->ret'].append(ret[0]['t']-subs[1]['t'])
            a['call'].append(ret[0]['t']-c['t'])
        elif cont and subs:
            key=(c['kind'],'continued', subs[0].get('pre'))
            a=agg[key]
            a['call->cont submitted'].append(subs[0]['t']-c['t'])
            a['call'].append(ret[0]['t']-c['t'])
for k,a in sorted(agg.items(), key=str):
    n=len(a['call'])
    print(k, n, '; '.join(f"{m} {st.median(v):.2f}" for m,v in a.items()))
