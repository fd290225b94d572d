#!/usr/bin/env node
// ort_bench.js: the ONNX Runtime peer of attnc's benchmark suite (issue 3).
//
//   node bench/ort_bench.js --threads N [--cases full_A,core_B] [--budget-ms MS]
//                           [--check-only] [--no-check] [--verbose]
//
// For every case of bench/cases.json it builds ONNX models in JavaScript
// (onnx-proto; weights are initializers, random but seeded), one model per
// operator the issue allows for that case, checks each model, times each
// one and prints one JSON line per case for the fastest:
//
//   {"case": "core_B", "peer": "ort", "op": "...", "median_ms": ..., ...}
//
// plus an "alternatives" field with every operator's median.  A case whose
// models all fail prints {"case", "peer": "ort", "error"}; a missing
// onnxruntime-node prints one {"peer": "ort", "skipped"} line.
//
// Only f32 models: a case with a "base" (issue 26's bf16, f16 and int8
// rows) is not run, since its f32 peer is ORT on the base case, which
// bench/report.py takes from the base's line; named in --cases, it prints
// {"case", "peer": "ort", "skipped"}.
//
// Sessions: CPU execution provider, intraOpNumThreads = N,
// interOpNumThreads = 1, sequential execution, all graph optimisations.
//
// Timing, per model: a session with ORT's profiler on, a warm-up, then runs
// filling --budget-ms; the median of the profiler's model_run events is the
// model's time (the wall clock of the same runs is reported as wall_ms).
// The binding copies every output into a new JS array after the run, even
// into preallocated outputs (ORT writes into those, then the binding copies
// them), and the profiler time leaves that copy out, as the issue asks for
// decode D's GroupQueryAttention with its KV cache (present bound to past,
// 2 x 16 MB copied back by the binding), see decodeVariants().
//
// Checks, so that a broken model cannot win by being fast:
//  1. every operator variant is first built at a tiny size with the same
//     builder code and compared with a float64 JavaScript reference
//     (refAttention below);
//     The KV cache steps are also compared with attnc's own (`attnc run`,
//     --attnc) on the same data: the output and both caches after the step;
//  2. at full size, every variant of a case gets the same weights and
//     inputs, and its output must agree with the first variant's and be
//     finite and non-constant.
// A variant that fails a check is reported (stderr, and in "rejected") and
// never chosen.

'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const a = { threads: 1, cases: null, budgetMs: 2000, check: true, checkOnly: false, verbose: false,
    attnc: path.join(__dirname, '..', 'build', 'attnc') };
  for (let i = 2; i < argv.length; i++) {
    const w = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${w} needs a value`);
      return argv[++i];
    };
    if (w === '--threads') a.threads = parseInt(next(), 10);
    else if (w === '--cases') a.cases = next().split(',').filter(Boolean);
    else if (w === '--budget-ms') a.budgetMs = parseFloat(next());
    else if (w === '--attnc') a.attnc = next();
    else if (w === '--no-check') a.check = false;
    else if (w === '--check-only') a.checkOnly = true;
    else if (w === '--verbose' || w === '-v') a.verbose = true;
    else if (w === '--help' || w === '-h') {
      console.log('usage: node bench/ort_bench.js --threads N [--cases a,b] [--budget-ms MS] [--check-only] [--no-check] [--attnc PATH] [--verbose]');
      process.exit(0);
    } else throw new Error(`unknown argument '${w}'`);
  }
  if (!(a.threads >= 1)) throw new Error('--threads must be a positive integer');
  return a;
}

const args = parseArgs(process.argv);
const log = (...m) => { if (args.verbose) console.error('ort:', ...m); };
const warn = (...m) => console.error('ort:', ...m);

let ort, onnx;
try {
  ort = require('onnxruntime-node');
  onnx = require('onnx-proto').onnx;
} catch (e) {
  console.log(JSON.stringify({ peer: 'ort', skipped: 'onnxruntime-node or onnx-proto not installed (cd bench && npm ci --ignore-scripts): ' + String(e.message).split('\n')[0] }));
  process.exit(0);
}
const ORT_VERSION = (() => {
  try { return require('onnxruntime-node/package.json').version; } catch (e) { return ort.env && ort.env.versions ? ort.env.versions.node : '?'; }
})();

// ------------------------------------------------------------- random data

function rng(seed) { // mulberry32: small, seeded, good enough for test data
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function uniform(r, n, a) { // n floats uniform in (-a, a)
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (2 * r() - 1) * a;
  return out;
}

const prod = (dims) => dims.reduce((p, d) => p * d, 1);

// transpose a dense tensor by a permutation (general, for small helpers and
// layout changes of inputs; not timed)
function permute(data, dims, perm) {
  const rank = dims.length;
  const odims = perm.map((p) => dims[p]);
  const istr = new Array(rank);
  istr[rank - 1] = 1;
  for (let i = rank - 2; i >= 0; i--) istr[i] = istr[i + 1] * dims[i + 1];
  const out = new data.constructor(data.length);
  const idx = new Array(rank).fill(0);
  for (let o = 0; o < out.length; o++) {
    let src = 0;
    for (let k = 0; k < rank; k++) src += idx[k] * istr[perm[k]];
    out[o] = data[src];
    for (let k = rank - 1; k >= 0; k--) {
      if (++idx[k] < odims[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

// (B,N,S,h) <-> (B,S,N*h)
const bnshToBsnh = (x, B, N, S, h) => permute(x, [B, N, S, h], [0, 2, 1, 3]);
const bsnhToBnsh = (x, B, S, N, h) => permute(x, [B, S, N, h], [0, 2, 1, 3]);

// concatenate matrices (rows x c_i) along columns
function concatCols(rows, mats, cols) {
  const total = cols.reduce((a, b) => a + b, 0);
  const out = new Float32Array(rows * total);
  for (let r = 0; r < rows; r++) {
    let off = 0;
    mats.forEach((m, j) => {
      out.set(m.subarray(r * cols[j], (r + 1) * cols[j]), r * total + off);
      off += cols[j];
    });
  }
  return out;
}

function concat(arrs) {
  const out = new Float32Array(arrs.reduce((n, a) => n + a.length, 0));
  let o = 0;
  for (const a of arrs) { out.set(a, o); o += a.length; }
  return out;
}

// ------------------------------------------------------- float64 reference

// y (rows, n) = x (rows, k) @ w (k, n) [+ b]
function refMatmul(x, rows, k, w, n, b) {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < n; j++) {
      let s = b ? b[j] : 0;
      for (let t = 0; t < k; t++) s += x[r * k + t] * w[t * n + j];
      y[r * n + j] = s;
    }
  }
  return y;
}

// Scaled dot-product attention over (B,H,Sq,d) queries and (B,G,Sk,d)
// keys/values, query head h uses KV head floor(h / (H/G)); optional additive
// bias (H,Sq,Sk) broadcast over B; causal is bottom-right aligned (query i
// sees key j <= i + Sk - Sq), which is top-left when Sq = Sk.
function refAttention(q, k, v, B, H, G, Sq, Sk, d, causal, bias) {
  const out = new Float64Array(B * H * Sq * d);
  const scale = 1 / Math.sqrt(d);
  const p = new Float64Array(Sk);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / (H / G));
      for (let i = 0; i < Sq; i++) {
        const qo = ((b * H + h) * Sq + i) * d;
        let m = -Infinity;
        const last = causal ? i + Sk - Sq : Sk - 1;
        for (let j = 0; j < Sk; j++) {
          if (j > last) { p[j] = -Infinity; continue; }
          const ko = ((b * G + g) * Sk + j) * d;
          let s = 0;
          for (let t = 0; t < d; t++) s += q[qo + t] * k[ko + t];
          s *= scale;
          if (bias) s += bias[(h * Sq + i) * Sk + j];
          p[j] = s;
          if (s > m) m = s;
        }
        let z = 0;
        for (let j = 0; j < Sk; j++) { p[j] = Math.exp(p[j] - m); z += p[j]; }
        for (let t = 0; t < d; t++) {
          let s = 0;
          for (let j = 0; j < Sk; j++) s += p[j] * v[((b * G + g) * Sk + j) * d + t];
          out[qo + t] = s / z;
        }
      }
    }
  }
  return out;
}

// --------------------------------------------------------- model building

const DT = { float32: 1, int32: 6, int64: 7 };

class Graph {
  constructor(name) {
    this.name = name;
    this.nodes = [];
    this.inits = [];
    this.inputs = [];
    this.outputs = [];
    this.feeds = {};
    this.n = 0;
  }
  tmp(p) { return `${p}_${this.n++}`; }
  // a graph input and the data fed to it
  input(name, dims, data) {
    this.inputs.push(valueInfo(name, dims, data));
    this.feeds[name] = new ort.Tensor(tensorType(data), data, dims);
    return name;
  }
  init(name, dims, data) {
    if (prod(dims) !== data.length) throw new Error(`initializer ${name}: ${dims} vs ${data.length}`);
    this.inits.push({
      name, dims, dataType: DT[tensorType(data)],
      rawData: Buffer.from(data.buffer, data.byteOffset, data.byteLength),
    });
    return name;
  }
  node(op, inputs, nout, attrs = {}, domain = '') {
    const outs = typeof nout === 'number' ? Array.from({ length: nout }, () => this.tmp(op)) : nout;
    const attribute = Object.entries(attrs).map(([k, v]) => attr(k, v));
    this.nodes.push({ opType: op, domain, name: this.tmp(`${op}_node`), input: inputs, output: outs, attribute });
    return outs.length === 1 ? outs[0] : outs;
  }
  output(name, dims, type = 'float32') {
    this.outputs.push(valueInfo(name, dims, type === 'float32' ? new Float32Array(0) : new Int32Array(0)));
    return name;
  }
  bytes(opset) {
    const model = {
      irVersion: 10,
      producerName: 'attnc-bench',
      opsetImport: [{ domain: '', version: opset }, { domain: 'com.microsoft', version: 1 }],
      graph: {
        name: this.name, node: this.nodes, initializer: this.inits,
        input: this.inputs, output: this.outputs,
      },
    };
    return onnx.ModelProto.encode(onnx.ModelProto.fromObject(model)).finish();
  }
}

function tensorType(data) {
  if (data instanceof Float32Array) return 'float32';
  if (data instanceof Int32Array) return 'int32';
  if (data instanceof BigInt64Array) return 'int64';
  throw new Error('unsupported array type');
}

function valueInfo(name, dims, data) {
  return {
    name,
    type: { tensorType: { elemType: DT[tensorType(data)], shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
  };
}

class F { constructor(v) { this.v = v; } } // marks a float attribute

function attr(name, v) {
  if (v instanceof F) return { name, type: 1, f: v.v };
  if (Array.isArray(v)) return { name, type: 7, ints: v };
  if (typeof v === 'string') return { name, type: 3, s: Buffer.from(v) };
  if (Number.isInteger(v)) return { name, type: 2, i: v };
  throw new Error(`attribute ${name}: unsupported value ${v}`);
}

const i64 = (vals) => BigInt64Array.from(vals.map((x) => BigInt(x)));
const i32 = (vals) => Int32Array.from(vals);

// ------------------------------------------------------------------- cases
//
// A "problem" holds one case's weights and inputs at some size; the
// *Variants(problem) functions return the operator choices for it, each
// { op, graph: Graph, out: name, toCanon(outData) -> canonical layout,
//   fetches?(), profile? }.  ref(problem) gives the float64 reference in
// the canonical layout (tiny sizes only).

// ---- full A-C: x (B,S,E), Linear layers as in nn.MultiheadAttention ----

function fullProblem(p, seed) {
  const r = rng(seed);
  const { B, S, E } = p;
  const a = 1 / Math.sqrt(E);
  const P = { ...p, d: E / p.H };
  P.x = uniform(r, B * S * E, 1);
  for (const w of ['Wq', 'Wk', 'Wv', 'Wo']) P[w] = uniform(r, E * E, a); // (in, out) = W^T
  for (const b of ['bq', 'bk', 'bv', 'bo']) P[b] = uniform(r, E, a);
  P.Wqkv = concatCols(E, [P.Wq, P.Wk, P.Wv], [E, E, E]);
  P.bqkv = concat([P.bq, P.bk, P.bv]);
  return P;
}

function fullRef(P) {
  const { B, S, E, H, d, causal } = P;
  const q = bsnhToBnsh(Float32Array.from(refMatmul(P.x, B * S, E, P.Wq, E, P.bq)), B, S, H, d);
  const k = bsnhToBnsh(Float32Array.from(refMatmul(P.x, B * S, E, P.Wk, E, P.bk)), B, S, H, d);
  const v = bsnhToBnsh(Float32Array.from(refMatmul(P.x, B * S, E, P.Wv, E, P.bv)), B, S, H, d);
  const o = bnshToBsnh(refAttention(q, k, v, B, H, H, S, S, d, causal, null), B, H, S, d);
  return refMatmul(o, B * S, E, P.Wo, E, P.bo);
}

function fullVariants(P) {
  const { B, S, E, H, causal } = P;
  const V = [];
  const outProj = (g, o) => g.node('Add', [g.node('MatMul', [o, g.init('Wo', [E, E], P.Wo)], 1), g.init('bo', [E], P.bo)], ['y']);
  const finish = (g, op, opset) => { outProj(g, g.lastAttn); g.output('y', [B, S, E]); return { op, graph: g, opset, out: 'y', toCanon: (y) => y }; };

  { // com.microsoft Attention: fused QKV weights and bias
    const g = new Graph('ms_attention');
    const x = g.input('x', [B, S, E], P.x);
    g.lastAttn = g.node('Attention', [x, g.init('Wqkv', [E, 3 * E], P.Wqkv), g.init('bqkv', [3 * E], P.bqkv)], 1,
      { num_heads: H, unidirectional: causal ? 1 : 0 }, 'com.microsoft');
    V.push(finish(g, 'Attention', 17));
  }
  { // three MatMuls + com.microsoft MultiHeadAttention (bias added inside)
    const g = new Graph('ms_mha');
    const x = g.input('x', [B, S, E], P.x);
    const qkv = ['Wq', 'Wk', 'Wv'].map((w) => g.node('MatMul', [x, g.init(w, [E, E], P[w])], 1));
    g.lastAttn = g.node('MultiHeadAttention', [...qkv, g.init('bqkv', [3 * E], P.bqkv)], 1,
      { num_heads: H, ...(causal ? { unidirectional: 1 } : {}) }, 'com.microsoft');
    V.push(finish(g, 'MatMul+MultiHeadAttention', 17));
  }
  { // one fused MatMul, Split, MultiHeadAttention
    const g = new Graph('ms_mha_fused');
    const x = g.input('x', [B, S, E], P.x);
    const qkv = g.node('MatMul', [x, g.init('Wqkv', [E, 3 * E], P.Wqkv)], 1);
    const parts = g.node('Split', [qkv, g.init('split', [3], i64([E, E, E]))], 3, { axis: 2 });
    g.lastAttn = g.node('MultiHeadAttention', [...parts, g.init('bqkv', [3 * E], P.bqkv)], 1,
      { num_heads: H, ...(causal ? { unidirectional: 1 } : {}) }, 'com.microsoft');
    V.push(finish(g, 'MatMul(QKV)+Split+MultiHeadAttention', 17));
  }
  if (causal) { // GroupQueryAttention is causal by definition: packed QKV input
    const g = new Graph('ms_gqa');
    const x = g.input('x', [B, S, E], P.x);
    const qkv = g.node('Add', [g.node('MatMul', [x, g.init('Wqkv', [E, 3 * E], P.Wqkv)], 1), g.init('bqkv', [3 * E], P.bqkv)], 1);
    g.lastAttn = g.node('GroupQueryAttention',
      [qkv, '', '', '', '', g.init('seqlens_k', [B], i32(new Array(B).fill(S - 1))), g.init('total_seq', [], i32([S]))],
      ['attn', 'present_k', 'present_v'], { num_heads: H, kv_num_heads: H }, 'com.microsoft');
    g.lastAttn = 'attn';
    V.push(finish(g, 'MatMul(QKV)+GroupQueryAttention', 17));
  }
  { // standard ONNX Attention (opset 23) on 3-D projected inputs
    const g = new Graph('onnx_attention');
    const x = g.input('x', [B, S, E], P.x);
    const qkv = [['Wq', 'bq'], ['Wk', 'bk'], ['Wv', 'bv']].map(([w, b]) =>
      g.node('Add', [g.node('MatMul', [x, g.init(w, [E, E], P[w])], 1), g.init(b, [E], P[b])], 1));
    g.lastAttn = g.node('Attention', qkv, 1, { q_num_heads: H, kv_num_heads: H, is_causal: causal ? 1 : 0 });
    V.push(finish(g, 'MatMul+Attention(opset23)', 23));
  }
  return V;
}

// ---- core A-C: q, k, v (B,H,S,d) already projected ----

function coreProblem(p, seed) {
  const r = rng(seed);
  const { B, H, S, d } = p;
  const P = { ...p };
  P.q = uniform(r, B * H * S * d, 1);
  P.k = uniform(r, B * H * S * d, 1);
  P.v = uniform(r, B * H * S * d, 1);
  return P;
}

const coreRef = (P) => refAttention(P.q, P.k, P.v, P.B, P.H, P.H, P.S, P.S, P.d, P.causal, null);

function coreVariants(P) {
  const { B, H, S, d, causal } = P;
  const D = H * d;
  const V = [];
  const bsnh = (x) => bnshToBsnh(x, B, H, S, d);
  const fromBsnh = (y) => bsnhToBnsh(y, B, S, H, d);
  { // MultiHeadAttention, all three (B,S,H*d)
    const g = new Graph('mha_bsnh');
    const ins = ['q', 'k', 'v'].map((n) => g.input(n, [B, S, D], bsnh(P[n])));
    g.node('MultiHeadAttention', ins, ['o'], { num_heads: H, ...(causal ? { unidirectional: 1 } : {}) }, 'com.microsoft');
    g.output('o', [B, S, D]);
    V.push({ op: 'MultiHeadAttention', graph: g, opset: 17, out: 'o', toCanon: fromBsnh });
  }
  { // MultiHeadAttention, q (B,S,H*d) and k, v already (B,H,S,d)
    const g = new Graph('mha_bnsh_kv');
    const q = g.input('q', [B, S, D], bsnh(P.q));
    const k = g.input('k', [B, H, S, d], P.k);
    const v = g.input('v', [B, H, S, d], P.v);
    g.node('MultiHeadAttention', [q, k, v], ['o'], { num_heads: H, ...(causal ? { unidirectional: 1 } : {}) }, 'com.microsoft');
    g.output('o', [B, S, D]);
    V.push({ op: 'MultiHeadAttention(BNSH k,v)', graph: g, opset: 17, out: 'o', toCanon: fromBsnh });
  }
  { // ONNX Attention (opset 23), 4-D (B,H,S,d) like attnc's own inputs
    const g = new Graph('onnx_attention');
    const ins = ['q', 'k', 'v'].map((n) => g.input(n, [B, H, S, d], P[n]));
    g.node('Attention', ins, ['o'], { is_causal: causal ? 1 : 0 });
    g.output('o', [B, H, S, d]);
    V.push({ op: 'Attention(opset23)', graph: g, opset: 23, out: 'o', toCanon: (y) => y });
  }
  if (causal) {
    const g = new Graph('gqa');
    const ins = ['q', 'k', 'v'].map((n) => g.input(n, [B, S, D], bsnh(P[n])));
    g.node('GroupQueryAttention',
      [...ins, '', '', g.init('seqlens_k', [B], i32(new Array(B).fill(S - 1))), g.init('total_seq', [], i32([S]))],
      ['o', 'present_k', 'present_v'], { num_heads: H, kv_num_heads: H }, 'com.microsoft');
    g.output('o', [B, S, D]);
    V.push({ op: 'GroupQueryAttention', graph: g, opset: 17, out: 'o', toCanon: fromBsnh });
  }
  return V;
}

// ---- decode D: q (B,H,1,d) over a KV cache k, v (B,G,Sk,d) ----

function decodeProblem(p, seed) {
  const r = rng(seed);
  const { B, H, G, Sk, d } = p;
  const P = { ...p };
  P.q = uniform(r, B * H * d, 1);
  P.k = uniform(r, B * G * Sk * d, 1);
  P.v = uniform(r, B * G * Sk * d, 1);
  return P;
}

const decodeRef = (P) => refAttention(P.q, P.k, P.v, P.B, P.H, P.G, 1, P.Sk, P.d, false, null);

function decodeVariants(P) {
  const { B, H, G, Sk, d } = P;
  const V = [];
  { // ONNX Attention (opset 23): GQA from the 4-D shapes, no cache update
    const g = new Graph('onnx_attention');
    const q = g.input('q', [B, H, 1, d], P.q);
    const k = g.input('k', [B, G, Sk, d], P.k);
    const v = g.input('v', [B, G, Sk, d], P.v);
    g.node('Attention', [q, k, v], ['o'], {});
    g.output('o', [B, H, 1, d]);
    V.push({ op: 'Attention(opset23)', graph: g, opset: 23, out: 'o', toCanon: (y) => y });
  }
  { // GroupQueryAttention with past KV: the cache holds Sk-1 past keys and
    // room for one more; the new token's k, v are the last ones of P.k/P.v.
    // present_key/present_value are bound to the very arrays fed as
    // past_key/past_value (ORT then appends in place: its shared-buffer
    // mode), and the run is timed by ORT's profiler.
    const g = new Graph('gqa_past');
    const last = (t) => { // (B,G,Sk,d) -> new token (B,1,G*d)
      const o = new Float32Array(B * G * d);
      for (let b = 0; b < B; b++) for (let gg = 0; gg < G; gg++)
        o.set(t.subarray(((b * G + gg) * Sk + Sk - 1) * d, ((b * G + gg) * Sk + Sk) * d), (b * G + gg) * d);
      return o;
    };
    const pastK = Float32Array.from(P.k); // cache buffers: own copies, the kernel writes into them
    const pastV = Float32Array.from(P.v);
    const q = g.input('q', [B, 1, H * d], P.q); // (B,H,1,d) and (B,1,H*d) are the same bytes
    const kn = g.input('k_new', [B, 1, G * d], last(P.k));
    const vn = g.input('v_new', [B, 1, G * d], last(P.v));
    const pk = g.input('past_key', [B, G, Sk, d], pastK);
    const pv = g.input('past_value', [B, G, Sk, d], pastV);
    const sl = g.input('seqlens_k', [B], i32(new Array(B).fill(Sk - 1)));
    const tl = g.input('total_sequence_length', [], i32([Sk]));
    g.node('GroupQueryAttention', [q, kn, vn, pk, pv, sl, tl], ['o', 'present_key', 'present_value'],
      { num_heads: H, kv_num_heads: G }, 'com.microsoft');
    g.output('o', [B, 1, H * d]);
    g.output('present_key', [B, G, Sk, d]);
    g.output('present_value', [B, G, Sk, d]);
    V.push({
      op: 'GroupQueryAttention(past KV, shared buffer)', graph: g, opset: 17, out: 'o', toCanon: (y) => y,
      shared: { present_key: g.feeds.past_key, present_value: g.feeds.past_value },
    });
  }
  return V;
}

// ---- KV cache steps (issue 28): a decoder layer's step over a cache ----
// x (B,1,E) is projected (MatMul + Add: q, k, v with biases, as attnc's
// gqa preset), GroupQueryAttention appends the new k, v rows to the caches
// (B,G,CAP,d) at position lens[b] and attends over lens[b] + 1 keys, and
// the output projection (MatMul + Add) follows: the whole step attnc's
// `gqa ... cache=CAP` kernel does, in one graph.

function cacheProblem(p, seed) {
  const r = rng(seed);
  const { B, E, H, G, d, CAP } = p;
  const P = { ...p, lens: p.lens || new Array(B).fill(p.cache_len) };
  const a = 1 / Math.sqrt(E);
  P.x = uniform(r, B * E, 1);
  P.Wq = uniform(r, E * H * d, a); // (in, out) = W^T
  P.Wk = uniform(r, E * G * d, a);
  P.Wv = uniform(r, E * G * d, a);
  P.Wo = uniform(r, H * d * E, 1 / Math.sqrt(H * d));
  P.bq = uniform(r, H * d, a);
  P.bk = uniform(r, G * d, a);
  P.bv = uniform(r, G * d, a);
  P.bo = uniform(r, E, 1 / Math.sqrt(H * d));
  // every position random, the unfilled ones too: a peer that reads past
  // lens[b] + 1 keys gets a wrong answer
  P.kCache = uniform(r, B * G * CAP * d, 1);
  P.vCache = uniform(r, B * G * CAP * d, 1);
  P.Wqkv = concatCols(E, [P.Wq, P.Wk, P.Wv], [H * d, G * d, G * d]);
  P.bqkv = concat([P.bq, P.bk, P.bv]);
  return P;
}

function cacheRef(P) {
  const { B, E, H, G, d, CAP } = P;
  const y = new Float64Array(B * E);
  for (let b = 0; b < B; b++) {
    const L = P.lens[b];
    const xb = P.x.subarray(b * E, (b + 1) * E);
    const q = Float32Array.from(refMatmul(xb, 1, E, P.Wq, H * d, P.bq)); // (1,H*d) = (1,H,1,d)
    const kn = refMatmul(xb, 1, E, P.Wk, G * d, P.bk);
    const vn = refMatmul(xb, 1, E, P.Wv, G * d, P.bv);
    const k = new Float32Array(G * (L + 1) * d); // (1,G,L+1,d): the cache's first L rows, then the new one
    const v = new Float32Array(G * (L + 1) * d);
    for (let g = 0; g < G; g++) {
      const src = (b * G + g) * CAP * d;
      k.set(P.kCache.subarray(src, src + L * d), g * (L + 1) * d);
      v.set(P.vCache.subarray(src, src + L * d), g * (L + 1) * d);
      for (let t = 0; t < d; t++) {
        k[(g * (L + 1) + L) * d + t] = kn[g * d + t];
        v[(g * (L + 1) + L) * d + t] = vn[g * d + t];
      }
    }
    const o = Float32Array.from(refAttention(q, k, v, 1, H, G, 1, L + 1, d, false, null));
    y.set(refMatmul(o, 1, H * d, P.Wo, E, P.bo), b * E);
  }
  return y;
}

function cacheVariants(P) {
  const { B, E, H, G, d, CAP } = P;
  const V = [];
  const total = Math.max(...P.lens) + 1;
  const gqa = (g, name, q, k, v, op) => {
    // cache buffers: the variant's own copies, which the runs write into
    const pk = g.input('past_key', [B, G, CAP, d], Float32Array.from(P.kCache));
    const pv = g.input('past_value', [B, G, CAP, d], Float32Array.from(P.vCache));
    const sl = g.input('seqlens_k', [B], i32(P.lens));
    const tl = g.input('total_sequence_length', [], i32([total]));
    g.node('GroupQueryAttention', [q, k, v, pk, pv, sl, tl], ['o', 'present_key', 'present_value'],
      { num_heads: H, kv_num_heads: G }, 'com.microsoft');
    g.node('Add', [g.node('MatMul', ['o', g.init('Wo', [H * d, E], P.Wo)], 1), g.init('bo', [E], P.bo)], ['y']);
    g.output('y', [B, 1, E]);
    g.output('present_key', [B, G, CAP, d]);
    g.output('present_value', [B, G, CAP, d]);
    // present_key/value bound to the arrays fed as past_key/value: ORT's
    // shared-buffer mode, which appends in place (see decodeVariants)
    V.push({
      op, graph: g, opset: 17, out: 'y', toCanon: (y) => y,
      shared: { present_key: g.feeds.past_key, present_value: g.feeds.past_value },
    });
  };
  { // three MatMul + Add, then GroupQueryAttention on separate q, k, v
    const g = new Graph('cache_gqa');
    const x = g.input('x', [B, 1, E], P.x);
    const [q, k, v] = [['Wq', 'bq', H], ['Wk', 'bk', G], ['Wv', 'bv', G]].map(([w, b, n]) =>
      g.node('Add', [g.node('MatMul', [x, g.init(w, [E, n * d], P[w])], 1), g.init(b, [n * d], P[b])], 1));
    gqa(g, 'cache_gqa', q, k, v, 'MatMul+GroupQueryAttention(past KV, shared buffer)');
  }
  { // one fused MatMul + Add, GroupQueryAttention on the packed q|k|v
    const g = new Graph('cache_gqa_packed');
    const x = g.input('x', [B, 1, E], P.x);
    const qkv = g.node('Add', [g.node('MatMul', [x, g.init('Wqkv', [E, (H + 2 * G) * d], P.Wqkv)], 1),
      g.init('bqkv', [(H + 2 * G) * d], P.bqkv)], 1);
    gqa(g, 'cache_gqa_packed', qkv, '', '', 'MatMul(QKV)+GroupQueryAttention(packed, past KV, shared buffer)');
  }
  return V;
}

// ---- attnc itself at the tiny size, through `attnc run` and safetensors ----

function writeSafetensors(file, tensors) { // tensors: name -> [dtype, dims, typed array]
  const header = {};
  let off = 0;
  for (const [name, [dtype, dims, data]] of Object.entries(tensors)) {
    header[name] = { dtype, shape: dims, data_offsets: [off, off + data.byteLength] };
    off += data.byteLength;
  }
  let h = JSON.stringify(header);
  h += ' '.repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  const parts = [len, Buffer.from(h)];
  for (const [, , data] of Object.values(tensors)) parts.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  fs.writeFileSync(file, Buffer.concat(parts));
}

function readSafetensorsF32(file) { // name -> Float32Array (F32 tensors only)
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString());
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__' || t.dtype !== 'F32') continue;
    const [a, b] = t.data_offsets;
    out[name] = new Float32Array(buf.buffer.slice(buf.byteOffset + 8 + n + a, buf.byteOffset + 8 + n + b));
  }
  return out;
}

// (in, out) -> (out, in): PyTorch's Linear layout, which attnc binds
const linearWeight = (w, nin, nout) => permute(w, [nin, nout], [1, 0]);

// attnc's step on the problem: out (B,1,E) and the updated caches
function attncCacheStep(P) {
  const { B, E, H, G, d, CAP } = P;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnc-ort-check-'));
  try {
    const inp = path.join(dir, 'in.safetensors');
    const outFile = path.join(dir, 'out.safetensors');
    writeSafetensors(inp, {
      'q_proj.weight': ['F32', [H * d, E], linearWeight(P.Wq, E, H * d)], 'q_proj.bias': ['F32', [H * d], P.bq],
      'k_proj.weight': ['F32', [G * d, E], linearWeight(P.Wk, E, G * d)], 'k_proj.bias': ['F32', [G * d], P.bk],
      'v_proj.weight': ['F32', [G * d, E], linearWeight(P.Wv, E, G * d)], 'v_proj.bias': ['F32', [G * d], P.bv],
      'o_proj.weight': ['F32', [E, H * d], linearWeight(P.Wo, H * d, E)], 'o_proj.bias': ['F32', [E], P.bo],
      x: ['F32', [B, 1, E], P.x],
      k_cache: ['F32', [B, G, CAP, d], P.kCache], v_cache: ['F32', [B, G, CAP, d], P.vCache],
      cache_len: ['I32', [B], i32(P.lens)],
    });
    const spec = `gqa x=${B},1,${E} heads=${H} kv_heads=${G} head_dim=${d} cache=${CAP}`;
    require('child_process').execFileSync(args.attnc, ['run', spec, '--tensors', inp, '--out', outFile, '--quiet', '--threads', '1'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    return readSafetensorsF32(outFile);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- AlphaFold E: the worksheet's gated row attention with pair bias ----

function afProblem(p, seed) {
  const r = rng(seed);
  const { N, S, Cin, H, c } = p;
  const Hc = H * c;
  const P = { ...p };
  const a = 1 / Math.sqrt(Cin);
  P.x = uniform(r, N * S * Cin, 1);
  for (const w of ['Wq', 'Wk', 'Wv', 'Wg']) P[w] = uniform(r, Cin * Hc, a); // (in, out); no q/k/v bias
  P.bg = uniform(r, Hc, a);
  P.Wo = uniform(r, Hc * Cin, 1 / Math.sqrt(Hc));
  P.bo = uniform(r, Cin, 1 / Math.sqrt(Hc));
  P.bias = uniform(r, H * S * S, 1); // pair bias (H, S, S), broadcast over the N rows
  P.Wqkv = concatCols(Cin, [P.Wq, P.Wk, P.Wv], [Hc, Hc, Hc]);
  return P;
}

function afRef(P) {
  const { N, S, Cin, H, c } = P;
  const Hc = H * c;
  const proj = (w) => bsnhToBnsh(Float32Array.from(refMatmul(P.x, N * S, Cin, w, Hc, null)), N, S, H, c);
  const o = bnshToBsnh(refAttention(proj(P.Wq), proj(P.Wk), proj(P.Wv), N, H, H, S, S, c, false, P.bias), N, H, S, c);
  const g = refMatmul(P.x, N * S, Cin, P.Wg, Hc, P.bg);
  for (let i = 0; i < o.length; i++) o[i] *= 1 / (1 + Math.exp(-g[i]));
  return refMatmul(o, N * S, Hc, P.Wo, Cin, P.bo);
}

function afVariants(P) {
  const { N, S, Cin, H, c } = P;
  const Hc = H * c;
  const V = [];
  const gateOut = (g, x, o) => {
    const gate = g.node('Sigmoid', [g.node('Add', [g.node('MatMul', [x, g.init('Wg', [Cin, Hc], P.Wg)], 1), g.init('bg', [Hc], P.bg)], 1)], 1);
    const go = g.node('Mul', [gate, o], 1);
    g.node('Add', [g.node('MatMul', [go, g.init('Wo', [Hc, Cin], P.Wo)], 1), g.init('bo', [Cin], P.bo)], ['y']);
    g.output('y', [N, S, Cin]);
  };
  const proj = (g, x, w) => g.node('MatMul', [x, g.init(w, [Cin, Hc], P[w])], 1);
  { // standard ops, as the PyTorch module does it (scale folded into Wq)
    const g = new Graph('af_std');
    const x = g.input('x', [N, S, Cin], P.x);
    const bias = g.input('bias', [H, S, S], P.bias);
    const Wqs = Float32Array.from(P.Wq, (w) => w / Math.sqrt(c));
    const heads = g.init('heads_shape', [4], i64([N, S, H, c]));
    const q = g.node('Transpose', [g.node('Reshape', [g.node('MatMul', [x, g.init('Wq_scaled', [Cin, Hc], Wqs)], 1), heads], 1)], 1, { perm: [0, 2, 1, 3] });
    const kT = g.node('Transpose', [g.node('Reshape', [proj(g, x, 'Wk'), heads], 1)], 1, { perm: [0, 2, 3, 1] });
    const v = g.node('Transpose', [g.node('Reshape', [proj(g, x, 'Wv'), heads], 1)], 1, { perm: [0, 2, 1, 3] });
    const a = g.node('Softmax', [g.node('Add', [g.node('MatMul', [q, kT], 1), bias], 1)], 1, { axis: -1 });
    const o = g.node('Reshape', [g.node('Transpose', [g.node('MatMul', [a, v], 1)], 1, { perm: [0, 2, 1, 3] }),
      g.init('merged_shape', [3], i64([N, S, Hc]))], 1);
    gateOut(g, x, o);
    V.push({ op: 'standard ops', graph: g, opset: 17, out: 'y', toCanon: (y) => y });
  }
  { // MultiHeadAttention with attention_bias (1,H,S,S)
    const g = new Graph('af_mha');
    const x = g.input('x', [N, S, Cin], P.x);
    const bias = g.input('bias', [1, H, S, S], P.bias);
    const o = g.node('MultiHeadAttention', [proj(g, x, 'Wq'), proj(g, x, 'Wk'), proj(g, x, 'Wv'), '', '', bias], 1,
      { num_heads: H }, 'com.microsoft');
    gateOut(g, x, o);
    V.push({ op: 'MatMul+MultiHeadAttention(attention_bias)', graph: g, opset: 17, out: 'y', toCanon: (y) => y });
  }
  { // com.microsoft Attention, fused QKV weights (zero bias), attention_bias
    const g = new Graph('af_ms_attention');
    const x = g.input('x', [N, S, Cin], P.x);
    const bias = g.input('bias', [1, H, S, S], P.bias);
    const o = g.node('Attention', [x, g.init('Wqkv', [Cin, 3 * Hc], P.Wqkv), g.init('bqkv', [3 * Hc], new Float32Array(3 * Hc)), '', '', bias], 1,
      { num_heads: H }, 'com.microsoft');
    gateOut(g, x, o);
    V.push({ op: 'Attention(attention_bias)', graph: g, opset: 17, out: 'y', toCanon: (y) => y });
  }
  { // ONNX Attention (opset 23) with an additive float attn_mask
    const g = new Graph('af_onnx_attention');
    const x = g.input('x', [N, S, Cin], P.x);
    const bias = g.input('bias', [1, H, S, S], P.bias);
    const o = g.node('Attention', [proj(g, x, 'Wq'), proj(g, x, 'Wk'), proj(g, x, 'Wv'), bias], 1,
      { q_num_heads: H, kv_num_heads: H });
    gateOut(g, x, o);
    V.push({ op: 'MatMul+Attention(opset23, attn_mask)', graph: g, opset: 23, out: 'y', toCanon: (y) => y });
  }
  return V;
}

const KINDS = {
  full: { problem: fullProblem, variants: fullVariants, ref: fullRef,
    tiny: (p) => ({ B: 2, S: 5, E: 16, H: 2, causal: p.causal }) },
  core: { problem: coreProblem, variants: coreVariants, ref: coreRef,
    tiny: (p) => ({ B: 2, H: 2, S: 5, d: 8, causal: p.causal }) },
  decode: { problem: decodeProblem, variants: decodeVariants, ref: decodeRef,
    tiny: () => ({ B: 1, H: 4, G: 2, Sk: 6, d: 8 }) },
  alphafold: { problem: afProblem, variants: afVariants, ref: afRef,
    tiny: () => ({ N: 3, S: 5, Cin: 16, H: 2, c: 4 }) },
  // sequences of different lengths, and a cache that is not full after the step
  cache: { problem: cacheProblem, variants: cacheVariants, ref: cacheRef, attnc: attncCacheStep,
    tiny: () => ({ B: 2, E: 16, H: 4, G: 2, d: 8, CAP: 8, lens: [5, 3] }) },
};

// ---------------------------------------------------------------- running

function sessionOptions(extra = {}) {
  return {
    executionProviders: ['cpu'],
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
    ...extra,
  };
}

// Output tensors preallocated in JS memory: ORT writes straight into them
// (which the KV cache of decode D needs: present_key/value are the past
// buffers), though the binding still returns copies.  Falls back to letting
// ORT allocate the outputs if this binding refuses preallocated ones.
function makeFetches(sess, v, outDims) {
  const f = {};
  for (const name of sess.outputNames) {
    if (v.shared && v.shared[name]) f[name] = v.shared[name];
    else if (name === v.out) f[name] = new ort.Tensor('float32', new Float32Array(prod(outDims)), outDims);
    else f[name] = null;
  }
  return f;
}

async function runOnce(sess, v, fetches) {
  const res = fetches ? await sess.run(v.graph.feeds, fetches) : await sess.run(v.graph.feeds);
  return res[v.out];
}

function outDimsOf(v) {
  const o = v.graph.outputs.find((x) => x.name === v.out);
  return o.type.tensorType.shape.dim.map((d) => Number(d.dimValue));
}

async function openSession(v, extra) {
  const bytes = v.graph.bytes(v.opset);
  return ort.InferenceSession.create(bytes, sessionOptions(extra));
}

// a session plus the way to run it (preallocated outputs if possible)
async function prepare(v, extra) {
  const sess = await openSession(v, extra);
  const dims = outDimsOf(v);
  let fetches = makeFetches(sess, v, dims);
  try {
    const t = await runOnce(sess, v, fetches);
    if (!t || t.data.length !== prod(dims)) throw new Error('bad preallocated output');
  } catch (e) {
    if (v.shared) throw e; // the cache case needs them
    log(`${v.op}: preallocated outputs refused (${String(e.message).split('\n')[0]}); timing with output copies`);
    fetches = null;
  }
  return { sess, fetches };
}

function maxRelErr(got, want) {
  let err = 0;
  let mag = 0;
  for (let i = 0; i < want.length; i++) mag = Math.max(mag, Math.abs(want[i]));
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= err)) err = Number.isNaN(e) ? Infinity : Math.max(err, e);
  }
  return err / Math.max(mag, 1e-30);
}

function sane(y) {
  let lo = Infinity;
  let hi = -Infinity;
  for (let i = 0; i < y.length; i++) {
    if (!Number.isFinite(y[i])) return 'non-finite output';
    if (y[i] < lo) lo = y[i];
    if (y[i] > hi) hi = y[i];
  }
  return hi - lo > 1e-6 ? null : 'constant output';
}

// check each variant at a tiny size against the float64 reference
async function checkTiny(kind, c) {
  const K = KINDS[kind];
  const P = K.problem({ ...c, ...K.tiny(c) }, 7);
  const want = K.ref(P);
  // cache cases: also attnc's own step on the same data, output and caches
  let mine = null;
  let mineErr = null;
  if (K.attnc) {
    try {
      mine = K.attnc(P);
    } catch (e) {
      mineErr = `attnc run (${args.attnc}) failed: ${String(e.stderr || e.message).trim().split('\n')[0]}`;
    }
  }
  const ok = new Map();
  for (const v of K.variants(P)) {
    try {
      if (mineErr) throw new Error(mineErr);
      const { sess, fetches } = await prepare(v);
      const got = v.toCanon((await runOnce(sess, v, fetches)).data);
      await sess.release();
      const err = maxRelErr(got, want);
      if (!(err <= 2e-5)) throw new Error(`differs from the float64 reference: max error ${err.toExponential(2)} of max |ref|`);
      let vsAttnc = '';
      if (mine) {
        const e = maxRelErr(got, mine.out);
        if (!(e <= 2e-5)) throw new Error(`differs from attnc's output: max error ${e.toExponential(2)} of max |out|`);
        // the caches after the step: the rows neither wrote equal, the new row close
        for (const [ort_, name] of [['present_key', 'k_cache'], ['present_value', 'v_cache']]) {
          const ec = maxRelErr(v.shared[ort_].data, mine[name]);
          if (!(ec <= 2e-5)) throw new Error(`its ${ort_} differs from attnc's ${name}: ${ec.toExponential(2)} of max |cache|`);
        }
        vsAttnc = `, against attnc ${e.toExponential(2)}`;
      }
      log(`${c.case} ${v.op}: tiny check OK (${err.toExponential(2)}${vsAttnc})`);
      ok.set(v.op, null);
    } catch (e) {
      ok.set(v.op, String(e.message).split('\n')[0]);
    }
  }
  return ok;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

// warm up, then enough runs to fill the time budget (5..200 runs)
async function timeIt(fn, budgetMs) {
  const warm = [];
  const w0 = performance.now();
  // at least one warm-up run, two unless one run takes half the budget,
  // more while they take under a fifth of the budget (at most 20)
  while (!warm.length || (warm.length < 2 && warm[0] < budgetMs / 2) ||
         (performance.now() - w0 < 0.2 * budgetMs && warm.length < 20)) {
    const t0 = performance.now();
    await fn();
    warm.push(performance.now() - t0);
  }
  const est = Math.min(...warm);
  const runs = Math.max(5, Math.min(200, Math.round(budgetMs / Math.max(est, 1e-3))));
  const times = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return { times, warmups: warm.length };
}

// median from ORT's profiler: the model_run events (and the attention
// node's own kernel time) of the timed runs, skipping the warm-up runs
async function timeProfiled(v, budgetMs) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnc-ort-prof-'));
  try {
    const { sess, fetches } = await prepare(v, { enableProfiling: true, profileFilePrefix: path.join(dir, 'prof') });
    const { times, warmups } = await timeIt(() => runOnce(sess, v, fetches), budgetMs);
    const out = v.toCanon((await runOnce(sess, v, fetches)).data); // for the checks
    sess.endProfiling();
    await sess.release();
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
    if (files.length !== 1) throw new Error(`profiler wrote ${files.length} files`);
    const ev = JSON.parse(fs.readFileSync(path.join(dir, files[0]), 'utf8'));
    // runs: 1 in prepare() (if it got to run), the warm-up, the timed
    // ones, 1 for the output
    const runsUs = ev.filter((e) => e.name === 'model_run').map((e) => e.dur);
    const skip = runsUs.length - times.length - 1;
    if (skip < warmups || skip > warmups + 1) {
      throw new Error(`profiler saw ${runsUs.length} runs for ${warmups} warm-up and ${times.length} timed`);
    }
    const kernUs = ev.filter((e) => e.cat === 'Node' && /_kernel_time$/.test(e.name) &&
      e.args && /Attention/.test(e.args.op_name || '')).map((e) => e.dur);
    const timedKern = kernUs.length === runsUs.length ? kernUs.slice(skip, skip + times.length) : [];
    return {
      out,
      median_ms: median(runsUs.slice(skip, skip + times.length)) / 1e3,
      kernel_ms: timedKern.length ? median(timedKern) / 1e3 : NaN, // the attention node alone
      wall_ms: median(times),
      runs: times.length,
      warmups,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// one variant: a profiled session, a warm-up, then runs filling the budget;
// each run's wall clock around `await session.run(...)` and the profiler's
// model_run for the same run.  model_run leaves out the binding's copy of
// every output into a new JS array, so it is the variant's time; the wall
// median is kept beside it.
async function benchVariant(v, budgetMs) {
  const prof = await timeProfiled(v, budgetMs);
  return {
    out: prof.out,
    median_ms: prof.median_ms,
    timing: 'profiler model_run',
    wall_ms: prof.wall_ms, profiler_ms: prof.median_ms, kernel_ms: prof.kernel_ms,
    runs: prof.runs, warmups: prof.warmups,
  };
}

async function benchCase(c) {
  const K = KINDS[c.kind];
  const tinyErr = args.check ? await checkTiny(c.kind, c) : new Map();
  const P = K.problem(c, 1234);
  const variants = K.variants(P);
  const alternatives = {};
  const rejected = {};
  let first = null; // canonical output of the first good variant, for cross-checks
  let best = null;
  for (const v of variants) {
    if (tinyErr.get(v.op)) { rejected[v.op] = `tiny check: ${tinyErr.get(v.op)}`; continue; }
    if (args.checkOnly) continue;
    try {
      const res = await benchVariant(v, args.budgetMs);
      if (args.check) {
        const bad = sane(res.out);
        if (bad) throw new Error(bad);
        if (first) {
          const err = maxRelErr(res.out, first.out);
          if (!(err <= 1e-3)) throw new Error(`disagrees with ${first.op} at full size: ${err.toExponential(2)} of max |out|`);
        } else first = { op: v.op, out: res.out };
      }
      delete res.out;
      alternatives[v.op] = +res.median_ms.toFixed(4);
      log(`${c.case} ${v.op}: ${res.median_ms.toFixed(3)} ms (${res.timing}; wall ${res.wall_ms.toFixed(3)}, ` +
        `attention kernel ${res.kernel_ms.toFixed(3)}; ${res.runs} runs)`);
      if (!best || res.median_ms < best.res.median_ms) best = { op: v.op, res };
    } catch (e) {
      rejected[v.op] = String(e.message).split('\n')[0];
    }
  }
  for (const [op, why] of Object.entries(rejected)) warn(`${c.case} ${op}: not used: ${why}`);
  if (args.checkOnly) {
    return { case: c.case, peer: 'ort', check_only: true, ok: variants.map((v) => v.op).filter((op) => !rejected[op]), rejected };
  }
  if (!best) return { case: c.case, peer: 'ort', error: 'no operator variant ran and passed the checks', rejected };
  const r = best.res;
  const f = (x) => +x.toFixed(4);
  const line = {
    case: c.case, peer: 'ort', op: best.op, median_ms: f(r.median_ms), timing: r.timing,
    wall_ms: f(r.wall_ms), profiler_ms: f(r.profiler_ms), attention_kernel_ms: Number.isNaN(r.kernel_ms) ? null : f(r.kernel_ms),
    runs: r.runs, threads: args.threads, version: ORT_VERSION, alternatives,
  };
  if (Object.keys(rejected).length) line.rejected = rejected;
  return line;
}

async function main() {
  const cases = JSON.parse(fs.readFileSync(path.join(__dirname, 'cases.json'), 'utf8'))
    .filter((c) => !args.cases || args.cases.includes(c.case));
  if (args.cases) {
    const known = new Set(cases.map((c) => c.case));
    for (const n of args.cases) if (!known.has(n)) throw new Error(`unknown case '${n}'`);
  }
  for (const c of cases) {
    let line;
    if (c.kind === 'train') {
      if (args.cases) console.log(JSON.stringify({ case: c.case, peer: 'ort', skipped: 'inference only: no backward pass to time' }));
      continue;
    }
    if (c.base) {
      if (args.cases) console.log(JSON.stringify({ case: c.case, peer: 'ort', skipped: `f32 models only: the f32 peer of ${c.case} is ORT on ${c.base}` }));
      continue;
    }
    try {
      line = await benchCase(c);
    } catch (e) {
      line = { case: c.case, peer: 'ort', error: String(e.message).split('\n')[0] };
    }
    console.log(JSON.stringify(line));
  }
}

main().catch((e) => {
  console.error('ort: error:', e && e.stack ? e.stack : e);
  process.exit(1);
});
