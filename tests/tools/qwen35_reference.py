#!/usr/bin/env python3
"""Independent pure-Python (stdlib only) reference for HF Qwen3_5ForCausalLM (qwen3_5_text).

Dev tool for issue #5 (hybrid parity); not run by CTest (about 20 s on one core). It follows
transformers 5.x modeling_qwen3_5.py and the generate (cache) path: the prompt is prefilled in one
forward (conv state = its last K-1 inputs, recurrent state, KV cache), then each further token is
decoded alone (causal_conv1d_update, torch_recurrent_gated_delta_rule, KV cache append, position =
previous + 1). The delta rule is evaluated token by token in the prefill too: HF's chunked form
(torch_chunk_gated_delta_rule, chunk 64) is the same recurrence in exact arithmetic. Arithmetic is
float64; with --f32 the places where HF casts to float32 inside a float64 model (RMSNorm, gated
RMSNorm, the delta rule and its state, g, rotary cos/sin) are rounded to float32 after each step.

Usage:
  python3 tests/tools/qwen35_reference.py tests/data/oracle/qwen35-hybrid-tiny [--f32] [--steps N]
           [--free] [--pad-token-id N] [--dump FILE.json]

It prints the prompt-logit error against reference.safetensors and, for each decode step
(teacher-forced on the fixture's greedy_ids unless --free), the argmax, the fixture's token and
the top-2 margin.

--pad-token-id N reproduces what HF generate does when it is given pad_token_id=N and no
attention_mask while N occurs in the prompt: it infers attention_mask = input_ids != N, so those
prompt tokens are treated as padding (excluded as attention keys, zeroed at the linear-attention
input, and position ids = cumsum(mask) - 1). The qwen35-hybrid-tiny fixture's prompt holds token 0
at position 25; its original greedy_ids were produced that way (pad id 0), which is why they
disagreed with the unpadded prompt at step 14 (issue #5): `--pad-token-id 0` reproduces all 16
of those tokens, and without it this reference and fak agree on the unpadded continuation.
"""
import argparse
import json
import math
import os
import struct
import sys
from array import array

# ----------------------------------------------------------------------------- I/O


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[base + a:base + b]
        code = {"F32": "f", "F64": "d", "I64": "q", "I32": "i"}[info["dtype"]]
        arr = array(code)
        arr.frombytes(raw)
        if sys.byteorder != "little":
            arr.byteswap()
        out[name] = (list(arr), info["shape"])
    return out


def rows(flat, shape):
    """Split a flat row-major list into a list of rows along the first dim."""
    r = shape[0]
    c = len(flat) // r
    return [flat[i * c:(i + 1) * c] for i in range(r)]


# ----------------------------------------------------------------------------- numerics

F32 = False


def f32v(v):
    """Round a list to float32 (only when --f32)."""
    if not F32:
        return v
    return array("f", v).tolist()


def f32s(x):
    if not F32:
        return x
    return struct.unpack("f", struct.pack("f", x))[0]


def matvec(W, x):
    return [sum(map(float.__mul__, row, x)) for row in W]


def silu(x):
    return x / (1.0 + math.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def softplus(x):
    # torch softplus with beta=1, threshold=20
    return x if x > 20.0 else math.log1p(math.exp(x))


def rmsnorm_1pw(x, w, eps):
    """Qwen3_5RMSNorm: computed on x.float(), output * (1 + w.float()), cast back."""
    x = f32v(x)
    var = f32s(sum(t * t for t in x) / len(x))
    inv = f32s(1.0 / math.sqrt(f32s(var + eps)))
    y = f32v([t * inv for t in x])
    return f32v([t * f32s(1.0 + wi) for t, wi in zip(y, w)])


def l2norm(x, eps=1e-6):
    s = f32s(sum(t * t for t in x))
    inv = f32s(1.0 / math.sqrt(f32s(s + eps)))
    return f32v([t * inv for t in x])


# ----------------------------------------------------------------------------- model


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        self.t = t
        self.H = c["hidden_size"]
        self.eps = c["rms_norm_eps"]
        self.layer_types = c["layer_types"]
        self.nkh = c["linear_num_key_heads"]
        self.nvh = c["linear_num_value_heads"]
        self.dk = c["linear_key_head_dim"]
        self.dv = c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        self.nh = c["num_attention_heads"]
        self.nkv = c["num_key_value_heads"]
        self.hd = c["head_dim"]
        rp = c.get("rope_parameters", {})
        self.theta = rp.get("rope_theta", c.get("rope_theta", 10000.0))
        prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        self.rdim = int(self.hd * prf)
        # HF builds inv_freq in float32: 1 / base ** (arange(0, dim, 2, float32) / dim)
        self.inv_freq = array("f", [
            1.0 / struct.unpack("f", struct.pack("f", self.theta ** struct.unpack("f", struct.pack("f", i / self.rdim))[0]))[0]
            for i in range(0, self.rdim, 2)]).tolist()

    def W(self, name):
        flat, shape = self.t[name]
        return rows(flat, shape)

    def V(self, name):
        return self.t[name][0]


class Cache:
    def __init__(self, m):
        self.conv = {}   # layer -> list of the last K-1 pre-conv qkv vectors
        self.rec = {}    # layer -> state[h][i][j]  (k_dim x v_dim)
        self.k = {}
        self.v = {}
        self.len = 0
        self.mask = []   # HF generate's 2D attention_mask over every token seen (1 = attend)
        self.pos = []    # position id of every token seen


def gated_deltanet(m, L, xs, cache, decode):
    p = "model.layers.%d.linear_attn." % L
    Wqkv = m.W(p + "in_proj_qkv.weight")
    Wz = m.W(p + "in_proj_z.weight")
    Wb = m.W(p + "in_proj_b.weight")
    Wa = m.W(p + "in_proj_a.weight")
    convw = rows(m.V(p + "conv1d.weight"), [m.t[p + "conv1d.weight"][1][0]])  # [C][K]
    A_log = m.V(p + "A_log")
    dt_bias = m.V(p + "dt_bias")
    normw = m.V(p + "norm.weight")
    Wo = m.W(p + "out_proj.weight")
    K = m.K
    T = len(xs)
    # HF create_recurrent_attention_mask: the 2D padding mask on an uncached forward whose mask is
    # not all ones, else None; apply_mask_to_padding_states then zeroes the masked rows.
    mask = cache.mask[-T:]
    if not decode and 0 in mask:
        xs = [x if mask[t] else [0.0] * len(x) for t, x in enumerate(xs)]
    qkv = [matvec(Wqkv, x) for x in xs]
    z = [matvec(Wz, x) for x in xs]
    b = [matvec(Wb, x) for x in xs]
    a = [matvec(Wa, x) for x in xs]
    C = len(qkv[0])
    # causal conv: prefill pads with zeros; decode uses the cached last K-1 inputs
    past = cache.conv.get(L) if decode else None
    if past is None:
        past = [[0.0] * C for _ in range(K - 1)]
    seq = past + qkv
    conv_out = []
    for t in range(T):
        win = seq[t:t + K]  # K inputs ending at token t
        o = []
        for ch in range(C):
            o.append(silu(sum(convw[ch][j] * win[j][ch] for j in range(K))))
        conv_out.append(o)
    cache.conv[L] = seq[-(K - 1):]
    kd, vd = m.dk * m.nkh, m.dv * m.nvh
    rep = m.nvh // m.nkh
    # g and beta (HF: g = -A_log.float().exp() * softplus(a.float() + dt_bias))
    A = [f32s(math.exp(f32s(al))) for al in A_log]
    beta = [[sigmoid(v) for v in bt] for bt in b]
    g = [[-A[h] * softplus(f32s(at[h]) + dt_bias[h]) for h in range(m.nvh)] for at in a]
    state = cache.rec.get(L) if decode else None
    if state is None:
        state = [[[0.0] * m.dv for _ in range(m.dk)] for _ in range(m.nvh)]
    outs = []
    scale = m.dk ** -0.5
    for t in range(T):
        o_all = []
        qf = conv_out[t][:kd]
        kf = conv_out[t][kd:2 * kd]
        vf = conv_out[t][2 * kd:]
        for h in range(m.nvh):
            kh = h // rep
            q = l2norm(f32v(qf[kh * m.dk:(kh + 1) * m.dk]))
            k = l2norm(f32v(kf[kh * m.dk:(kh + 1) * m.dk]))
            q = f32v([x * scale for x in q])
            v = f32v(vf[h * m.dv:(h + 1) * m.dv])
            S = state[h]
            dec = f32s(math.exp(f32s(g[t][h])))
            bt = f32s(beta[t][h])
            for i in range(m.dk):
                S[i] = f32v([s * dec for s in S[i]])
            kv_mem = [sum(S[i][j] * k[i] for i in range(m.dk)) for j in range(m.dv)]
            delta = f32v([(v[j] - kv_mem[j]) * bt for j in range(m.dv)])
            for i in range(m.dk):
                S[i] = f32v([S[i][j] + k[i] * delta[j] for j in range(m.dv)])
            o = [sum(S[i][j] * q[i] for i in range(m.dk)) for j in range(m.dv)]
            o = f32v(o)
            # Qwen3_5RMSNormGated: fp32 norm, weight * x.to(input dtype), * silu(gate.float())
            var = f32s(sum(x * x for x in o) / m.dv)
            inv = f32s(1.0 / math.sqrt(f32s(var + m.eps)))
            on = f32v([x * inv for x in o])
            zh = f32v(z[t][h * m.dv:(h + 1) * m.dv])
            o_all.extend(normw[j] * on[j] * f32s(silu(zh[j])) for j in range(m.dv))
        outs.append(matvec(Wo, o_all))
    cache.rec[L] = state
    return outs


def rope_cs(m, pos):
    # HF: freqs = inv_freq(f32) @ position(f32) in float32, cos/sin in float32, then cast to model dtype
    cos, sin = [], []
    for f in m.inv_freq:
        fr = struct.unpack("f", struct.pack("f", f * float(pos)))[0]
        cos.append(struct.unpack("f", struct.pack("f", math.cos(fr)))[0])
        sin.append(struct.unpack("f", struct.pack("f", math.sin(fr)))[0])
    return cos + cos, sin + sin


def apply_rope(x, cos, sin, rdim):
    xr = x[:rdim]
    half = rdim // 2
    rot = [-v for v in xr[half:]] + xr[:half]
    return [xr[i] * cos[i] + rot[i] * sin[i] for i in range(rdim)] + x[rdim:]


def full_attention(m, L, xs, cache, start_pos):
    p = "model.layers.%d.self_attn." % L
    Wq = m.W(p + "q_proj.weight")
    Wk = m.W(p + "k_proj.weight")
    Wv = m.W(p + "v_proj.weight")
    Wo = m.W(p + "o_proj.weight")
    qn = m.V(p + "q_norm.weight")
    kn = m.V(p + "k_norm.weight")
    hd, nh, nkv = m.hd, m.nh, m.nkv
    ks = cache.k.setdefault(L, [])
    vs = cache.v.setdefault(L, [])
    qs, gates = [], []
    for t, x in enumerate(xs):
        pos = cache.pos[start_pos + t]
        qg = matvec(Wq, x)
        kx = matvec(Wk, x)
        vx = matvec(Wv, x)
        cos, sin = rope_cs(m, pos)
        qh, gh = [], []
        for h in range(nh):
            blk = qg[h * 2 * hd:(h + 1) * 2 * hd]
            qh.append(apply_rope(rmsnorm_1pw(blk[:hd], qn, m.eps), cos, sin, m.rdim))
            gh.extend(blk[hd:])
        kh = [apply_rope(rmsnorm_1pw(kx[h * hd:(h + 1) * hd], kn, m.eps), cos, sin, m.rdim) for h in range(nkv)]
        vh = [vx[h * hd:(h + 1) * hd] for h in range(nkv)]
        ks.append(kh)
        vs.append(vh)
        qs.append(qh)
        gates.append(gh)
    outs = []
    scaling = hd ** -0.5
    for t in range(len(xs)):
        n_keys = start_pos + t + 1  # causal
        o_all = []
        for h in range(nh):
            g = h // (nh // nkv)
            q = qs[t][h]
            keys = [j for j in range(n_keys) if cache.mask[j]]  # causal + padding mask
            sc = [sum(map(float.__mul__, q, ks[j][g])) * scaling for j in keys]
            mx = max(sc)
            e = [math.exp(s - mx) for s in sc]
            den = sum(e)
            o = [0.0] * hd
            for jj, j in enumerate(keys):
                w = e[jj] / den
                vj = vs[j][g]
                for d in range(hd):
                    o[d] += w * vj[d]
            o_all.extend(o)
        o_all = [o_all[i] * sigmoid(gates[t][i]) for i in range(len(o_all))]
        outs.append(matvec(Wo, o_all))
    return outs


def forward(m, ids, cache, decode, hidden_dump=None, mask=None):
    """One HF forward over ids (prefill when not decode). Returns logits per position."""
    emb = m.W("model.embed_tokens.weight")
    xs = [list(emb[i]) for i in ids]
    start = cache.len
    if mask is None:
        mask = [1] * len(ids)
    cache.mask += mask
    if decode:
        # generate: each new token's position is the previous one + 1
        cache.pos += [cache.pos[-1] + 1 + t for t in range(len(ids))]
    else:
        # generate: position_ids = attention_mask.cumsum(-1) - 1, masked positions set to 1
        c = 0
        for v in mask:
            c += v
            cache.pos.append(c - 1 if v else 1)
    if hidden_dump is not None:
        hidden_dump.append([list(x) for x in xs])
    for L, lt in enumerate(m.layer_types):
        p = "model.layers.%d." % L
        hn = [rmsnorm_1pw(x, m.V(p + "input_layernorm.weight"), m.eps) for x in xs]
        if lt == "linear_attention":
            ao = gated_deltanet(m, L, hn, cache, decode)
        else:
            ao = full_attention(m, L, hn, cache, start)
        xs = [[a + b for a, b in zip(x, o)] for x, o in zip(xs, ao)]
        gw = m.W(p + "mlp.gate_proj.weight")
        uw = m.W(p + "mlp.up_proj.weight")
        dw = m.W(p + "mlp.down_proj.weight")
        new = []
        for x in xs:
            h = rmsnorm_1pw(x, m.V(p + "post_attention_layernorm.weight"), m.eps)
            gu = [silu(gv) * uv for gv, uv in zip(matvec(gw, h), matvec(uw, h))]
            new.append([a + b for a, b in zip(x, matvec(dw, gu))])
        xs = new
        if hidden_dump is not None:
            hidden_dump.append([list(x) for x in xs])
    cache.len += len(ids)
    xs = [rmsnorm_1pw(x, m.V("model.norm.weight"), m.eps) for x in xs]
    if hidden_dump is not None:
        hidden_dump[-1] = [list(x) for x in xs]
    lm = m.W("lm_head.weight")
    return [matvec(lm, x) for x in xs]


def top2(v):
    i1 = max(range(len(v)), key=v.__getitem__)
    i2 = max((i for i in range(len(v)) if i != i1), key=v.__getitem__)
    return i1, i2, v[i1] - v[i2]


def main():
    global F32
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--reference", default=None)
    ap.add_argument("--f32", action="store_true", help="emulate HF's float32 casts")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--free", action="store_true", help="free-run greedy instead of teacher forcing")
    ap.add_argument("--pad-token-id", type=int, default=None,
                    help="emulate HF generate given this pad_token_id: with no explicit attention_mask "
                         "it infers attention_mask = input_ids != pad_token_id when the pad id occurs "
                         "in the prompt (GenerationMixin._prepare_attention_mask_for_generation)")
    ap.add_argument("--dump", default=None, help="write per-step logits as JSON here")
    args = ap.parse_args()
    F32 = args.f32
    m = Model(args.model_dir)
    ref = read_safetensors(args.reference or os.path.join(args.model_dir, "reference.safetensors"))
    ids = [int(x) for x in ref["case0.input_ids"][0]]
    greedy = [int(x) for x in ref["case0.greedy_ids"][0]]
    want_logits = rows(*ref["case0.logits"])
    V = len(want_logits[0])
    mask = None
    if args.pad_token_id is not None and args.pad_token_id in ids:
        mask = [0 if t == args.pad_token_id else 1 for t in ids]
        print("generate would infer attention_mask = input_ids != %d: masked prompt positions %s" %
              (args.pad_token_id, [i for i, v in enumerate(mask) if not v]))
    cache = Cache(m)
    hid = []
    logits = forward(m, ids, cache, decode=False, hidden_dump=hid, mask=mask)
    mx = max(abs(a - b) for r1, r2 in zip(logits, want_logits) for a, b in zip(r1, r2))
    am = sum(1 for r1, r2 in zip(logits, want_logits) if top2(r1)[0] == top2(r2)[0])
    print("prompt: T=%d max|dlogit|=%.3g argmax %d/%d" % (len(ids), mx, am, len(ids)))
    for n in range(len(hid)):
        key = "case0.hidden_states.%d" % n
        if key in ref:
            w = rows(*ref[key])
            d = max(abs(a - b) for r1, r2 in zip(hid[n], w) for a, b in zip(r1, r2))
            print("  hidden_states.%d max|d|=%.3g" % (n, d))
    steps = args.steps if args.steps is not None else len(greedy)
    out = {"prompt_logits_last": logits[-1], "steps": []}
    cur = logits[-1]
    got = []
    ok = 0
    for s in range(steps):
        i1, i2, margin = top2(cur)
        want = greedy[s]
        gap = cur[i1] - cur[want]
        got.append(i1)
        ok += i1 == want
        print("step %2d: argmax %3d (2nd %3d, margin %.4f) ref %3d%s  logit[ref]=%.6f logit[argmax]=%.6f" %
              (s, i1, i2, margin, want, "" if i1 == want else "  MISMATCH gap %.4f" % gap, cur[want], cur[i1]))
        out["steps"].append(cur)
        if s + 1 == steps:
            break
        nxt = i1 if args.free else want
        cur = forward(m, [nxt], cache, decode=True)[0]
    print("greedy %s %d/%d" % ("free-run" if args.free else "teacher-forced", ok, steps))
    print("argmax sequence:", got)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
