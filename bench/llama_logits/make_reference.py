#!/usr/bin/env python3
"""dump_logits' output as a reference `fak parity` reads: the prompt ids of an existing fixture
reference (case0.input_ids), llama.cpp's logits for every position and its 16 greedy ids.
Usage: make_reference.py FIXTURE_REFERENCE.safetensors OUT.bin REFERENCE_OUT.safetensors"""
import json, struct, sys, array
ref, binf, out = sys.argv[1:4]
f=open(ref,'rb').read(); n=struct.unpack('<Q',f[:8])[0]; h=json.loads(f[8:8+n]); base=8+n
a,b=h['case0.input_ids']['data_offsets']; ids=array.array('q'); ids.frombytes(f[base+a:base+b])
logits=open(binf,'rb').read()
greedy=array.array('q',[int(l) for l in open(binf+'.greedy')])
T=len(ids); V=len(logits)//4//T
tensors=[('case0.input_ids','I64',[T],ids.tobytes()),('case0.logits','F32',[T,V],logits),('case0.greedy_ids','I64',[16],greedy.tobytes())]
hdr={}; off=0; blob=b''
for name,dt,shape,data in tensors:
    hdr[name]={'dtype':dt,'shape':shape,'data_offsets':[off,off+len(data)]}; off+=len(data); blob+=data
hj=json.dumps(hdr).encode(); hj+=b' '*((8-len(hj)%8)%8)
open(out,'wb').write(struct.pack('<Q',len(hj))+hj+blob)
print(T,V,list(greedy))
