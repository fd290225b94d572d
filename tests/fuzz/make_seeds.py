#!/usr/bin/env python3
"""Write the seed corpora under tests/fuzz/corpus/ (deterministic).

    python3 tests/fuzz/make_seeds.py      # from anywhere; rewrites the seeds

spec/ and gen/: every spec file in specs/, every spec of
tests/golden/cases.txt, and hand-written specs around the edges of the
grammar (comments, flags, core mode, named dims, numbers, refusals).
safetensors/: small valid files (every dtype, empty and scalar tensors,
metadata, escapes, misaligned offsets) and malformed ones, plus a few
golden files cut short.  The committed files are what the fuzzers start
from; this script only documents how they were made.
"""
import glob
import hashlib
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(kind, name, data):
    d = os.path.join(CORPUS, kind)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


EXTRA_SPECS = {
    "flags_only": "mha x=B,S,64 heads=4 causal gated qkv_bias out_bias",
    "comments_tabs": "# a comment\n\tmha\tx=2,S,32 # trailing\r\n heads=2\n# end",
    "core_plain": "mode=core q=B,8,S,64",
    "core_kv_named": "mode=core q=B,H2,8,Sq,32 kv=B,H2,2,Sk,32 causal=bottom_right window=4,0",
    "core_bias_nan": "mode=core q=2,4,6,8 bias=4,1,6 empty_rows=nan mask=key",
    "scale_forms": "mha x=3,5,8 heads=2 scale=1.5e-3",
    "scale_dot": "mha x=3,5,8 heads=2 scale=.25 dtype=f64",
    "scale_exp": "mha x=3,5,8 heads=2 scale=+2E+2",
    "attn_dim_pos": "alphafold x=N,S,R,32 attn_dim=1 heads=4 head_dim=8 gated bias=4,S,S",
    "global_masked": "alphafold x=S,R,64 attn_dim=-3 heads=8 head_dim=8 global global_mean=masked mask=key",
    "gqa_named": "gqa x=B,T,96 heads=12 kv_heads=4 causal=true mask=key name=my_kernel_1",
    "mqa_cross": "mqa x=B,S,64 kv=B,K,32 heads=8 head_dim=16 causal=bottom_right",
    "window_none": "mha x=1,9,12 heads=3 window=none causal=false empty_rows=uniform",
    "preset_key": "preset=alphafold x=2,3,8 heads=2 qkv_bias=no out_bias=off gated=yes global=0",
    "derived_name": "mha x=2,4,8 heads=2 name=attnc_0123abcd",
    "max_rank": "mha x=A,B,C,D,E,16 attn_dim=-3 heads=2 bias=A,B,D,2,C,C",
    "bad_mqa_kv_heads": "mqa x=2,3,8 heads=2 kv_heads=2",
    "bad_dup": "mha x=2,3,8 heads=2 heads=4",
    "bad_name": "mha x=2,3,8 heads=2 name=\"a\\n;abort();//",
    "bad_scale": "mha x=2,3,8 heads=2 scale=1;abort()",
    "bad_inf": "mha x=2,3,8 heads=2 scale=1e999",
    "bad_nan": "mha x=2,3,8 heads=2 scale=nan",
    "bad_lua": "mha x=2,3,8 heads=2 name=]]os.execute('id')--[[",
    "bad_utf8": "mha x=2,S\u00e9,8 heads=2 name=caf\u00e9",
    "bad_keyword": "mha x=2,int,8 heads=2",
    "bad_typo": "mah x=2,3,8 heds=2",
    "bad_zero_dim": "mha x=0,3,8 heads=2",
    "bad_overflow": "mha x=2147483647,2147483647,8 heads=2",
    "bad_head_dim": "mha x=2,3,8 heads=2 head_dim=99999",
    "bad_empty": "",
}


def spec_seeds():
    seeds = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "specs", "*.attn"))):
        seeds["file_" + os.path.basename(path)[:-5]] = open(path, encoding="utf-8").read()
    with open(os.path.join(ROOT, "tests", "golden", "cases.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, _prefix, spec = line.split("\t")
            seeds["case_" + name] = spec
    for name, spec in EXTRA_SPECS.items():
        seeds["extra_" + name] = spec
    for name, text in seeds.items():
        write("spec", name, text)
        write("gen", name, text)


DTYPES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I8": 1, "I16": 2, "I32": 4, "I64": 8,
          "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}


def st_file(header, data=b"", pad=True, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def packed(tensors, meta=None):
    """tensors: list of (name, dtype, shape); data is a byte pattern."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dt, shape in tensors:
        n = DTYPES[dt]
        for d in shape:
            n *= d
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes((len(data) + i) * 37 % 251 for i in range(n))
    return header, data


def safetensors_seeds():
    h, d = packed([("x", "F32", [2, 3]), ("linear_q.weight", "F32", [4, 3]), ("mask", "U8", [2, 3])],
                  {"format": "pt"})
    write("safetensors", "valid_small", st_file(h, d))
    h, d = packed([(dt.lower(), dt, [3]) for dt in DTYPES])
    write("safetensors", "valid_every_dtype", st_file(h, d))
    h, d = packed([("scalar", "F64", []), ("empty", "F32", [0, 5]), ("one", "I8", [1, 1, 1, 1, 1, 1, 1, 1])])
    write("safetensors", "valid_scalar_empty_rank8", st_file(h, d))
    write("safetensors", "valid_empty_header", st_file({}))
    write("safetensors", "valid_only_metadata", st_file({"__metadata__": {"a": "b", "c": ""}}))
    # misaligned: an I8 first so the F32 after it starts at offset 1
    h, d = packed([("a", "I8", [1]), ("b", "F32", [2]), ("c", "F64", [1])])
    write("safetensors", "valid_misaligned", st_file(h, d))
    raw = (b'{"caf\\u00e9\\ud83d\\ude00\\n":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
           b'"__metadata__":{"k\\"\\\\\\/\\b\\f\\r\\t":"v"}}')
    write("safetensors", "valid_escapes", st_file(None, b"\x01\x02", raw_header=raw))
    write("safetensors", "valid_unpadded_ws",
          st_file(None, b"\0" * 8, pad=False,
                  raw_header=b' \t\r\n{ "t" : { "shape" : [ 2 ] , "data_offsets" : [ 0 , 8 ] , "dtype" : "F32" } }  '))
    h, d = packed([("x", "F32", [2, 2])])
    write("safetensors", "valid_trailing_data", st_file(h, d + b"extra bytes"))
    # malformed
    write("safetensors", "bad_short", b"\x05\x00\x00")
    write("safetensors", "bad_len_past_end", struct.pack("<Q", 1000) + b"{}")
    write("safetensors", "bad_len_huge", struct.pack("<Q", 2 ** 63) + b"{}")
    write("safetensors", "bad_offsets_out_of_range",
          st_file({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}}, b"\0" * 8))
    write("safetensors", "bad_overlap",
          st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
    write("safetensors", "bad_begin_after_end",
          st_file({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, b"\0" * 4))
    write("safetensors", "bad_unknown_dtype",
          st_file({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
    write("safetensors", "bad_negative_shape",
          st_file({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}))
    write("safetensors", "bad_shape_overflow",
          st_file({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}))
    write("safetensors", "bad_size_mismatch",
          st_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
    write("safetensors", "bad_duplicate_name", st_file(None, b"\0\0", raw_header=(
        b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}')))
    write("safetensors", "bad_rank9",
          st_file({"a": {"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}}, b"\0"))
    write("safetensors", "bad_float_offset", st_file(None, b"\0\0\0\0", raw_header=(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}}')))
    write("safetensors", "bad_nul_name", st_file(None, b"", raw_header=(
        b'{"a\\u0000b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')))
    write("safetensors", "bad_lone_surrogate", st_file(None, b"", raw_header=(
        b'{"\\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')))
    write("safetensors", "bad_invalid_utf8", st_file(None, b"", raw_header=(
        b'{"\xc3\x28":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}')))
    write("safetensors", "bad_trailing_garbage", st_file(None, b"", raw_header=b'{} x'))
    write("safetensors", "bad_unterminated", st_file(None, b"", pad=False, raw_header=b'{"a":{"dtype":"U8'))
    write("safetensors", "bad_metadata_number", st_file(None, b"", raw_header=b'{"__metadata__":{"a":1}}'))
    # golden files cut short, and the two smallest in full
    goldens = sorted(glob.glob(os.path.join(ROOT, "tests", "golden", "*.safetensors")), key=os.path.getsize)
    for path in goldens[:2]:
        write("safetensors", "golden_" + os.path.basename(path)[:-12], open(path, "rb").read())
    for path, cut in zip(goldens[2:8], (7, 64, 300, 600, 1000, 2000)):
        data = open(path, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        if cut >= 600:
            cut = 8 + n + (cut - 600)  # whole header, data cut short
        write("safetensors", "golden_cut%d_%s" % (cut, os.path.basename(path)[:-12]), data[:cut])


if __name__ == "__main__":
    spec_seeds()
    safetensors_seeds()
    for kind in ("spec", "gen", "safetensors"):
        print(kind, len(os.listdir(os.path.join(CORPUS, kind))))
