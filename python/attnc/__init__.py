"""attnc from Python: compile an attention spec, run it on numpy arrays.

    import attnc
    k = attnc.compile("mha x=B,S,64 heads=4 causal")
    outs = k.run({"x": x, "q_proj.weight": wq, ...})
    outs["out"]; k.source; k.canonical

A thin ctypes layer over libattnc.so (no compiled extension).  The library
is found, in this order, at $ATTNC_LIB; where `make install` put it (the
path is written into _libpath.py at install time); in the build/ folder of
the source tree this package sits in (PYTHONPATH=python after make); by the
system loader (libattnc.so).  docs/python.md documents every call.
"""

import ctypes
import os
import warnings

import numpy as np

__all__ = [
    "Error", "Kernel", "compile", "canonical", "explain", "isa",
    "load_safetensors", "save_safetensors", "quantize_int8",
    "bf16_to_float32", "float32_to_bf16", "library_path", "__version__",
]

__version__ = "0.1.0"  # ATTNC_VERSION of runtime/attnc.h (a test holds them equal)

MAX_RANK = 8

# attnc_status, in the order of runtime/attnc.h
_STATUS = ["ATTNC_OK", "ATTNC_ESPEC", "ATTNC_EGEN", "ATTNC_ECOMPILE", "ATTNC_EBIND",
           "ATTNC_EMISSING", "ATTNC_EIO", "ATTNC_EFORMAT", "ATTNC_ENOMEM", "ATTNC_EARG"]

# attnc_dtype codes and the numpy dtype that holds each (BF16: its bits, as uint16)
_F32, _F64, _F16, _BF16, _I8, _I16, _I32, _I64, _U8, _U16, _U32, _U64, _BOOL = range(13)
_NUMPY_OF = {
    _F32: np.float32, _F64: np.float64, _F16: np.float16, _BF16: np.uint16,
    _I8: np.int8, _I16: np.int16, _I32: np.int32, _I64: np.int64,
    _U8: np.uint8, _U16: np.uint16, _U32: np.uint32, _U64: np.uint64, _BOOL: np.bool_,
}
_CODE_OF = {
    np.dtype(np.float32): _F32, np.dtype(np.float64): _F64, np.dtype(np.float16): _F16,
    np.dtype(np.int8): _I8, np.dtype(np.int16): _I16, np.dtype(np.int32): _I32,
    np.dtype(np.int64): _I64, np.dtype(np.uint8): _U8, np.dtype(np.uint16): _BF16,
    np.dtype(np.uint32): _U32, np.dtype(np.uint64): _U64, np.dtype(np.bool_): _BOOL,
}
# Inputs that hold integers, where a uint16 array means U16, not bfloat16 bits.
_INTEGER_INPUTS = ("mask", "q_pos", "k_pos", "cache_len")
# Inputs (as opposed to weights): with a prefix they bind with or without it,
# as attnc_bind_safetensors binds them.
_INPUTS = ("x", "kv", "bias", "mask", "q", "k", "v", "sinks", "rope_freqs", "q_pos", "k_pos",
           "k_cache", "v_cache", "cache_len", "k_cache_scale", "v_cache_scale")
# The outputs besides "out" that a spec may ask for (attnc_output_info).
_EXTRA_OUTPUTS = ("lse", "attn")

_BACKENDS = {None: 0, "default": 0, "tcc": 1, "cc": 2}
_BACKEND_NAMES = {1: "tcc", 2: "cc"}
_FORMS = {"fast": 0, "plain": 1}


class Error(Exception):
    """An attnc failure: str() is the compiler-style message.

    Attributes: code (the attnc_status number), status ("ATTNC_ESPEC", ...),
    where ("spec:1:13" for spec errors, "" otherwise), line, col (1-based,
    0 when there is no position) and message (what is wrong, and the fix).
    """

    def __init__(self, message, code=9, where="", line=0, col=0):
        self.code = code
        self.status = _STATUS[code] if 0 <= code < len(_STATUS) else "ATTNC_E%d" % code
        self.where = where
        self.line = line
        self.col = col
        self.message = message
        super().__init__("%s: error: %s" % (where, message) if where else message)


class _Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("where", ctypes.c_char * 256), ("line", ctypes.c_int),
                ("col", ctypes.c_int), ("message", ctypes.c_char * 1024)]

    def error(self):
        return Error(self.message.decode("utf-8", "replace"), self.code,
                     self.where.decode("utf-8", "replace"), self.line, self.col)


class _Tensor(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_RANK), ("data", ctypes.c_void_p)]


class _Options(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("threads", ctypes.c_int),
                ("spec_name", ctypes.c_char_p), ("form", ctypes.c_int)]


def _candidates():
    env = os.environ.get("ATTNC_LIB")
    if env:
        return [env]
    found = []
    try:
        from . import _libpath  # written by make install
        found.append(_libpath.LIBRARY)
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    found.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libattnc.so"))
    found.append("libattnc.so")
    return found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            # CDLL, not PyDLL: ctypes releases the GIL around every call
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("attnc: cannot load libattnc.so; tried: %s. Run make (source tree), "
                      "make install, or set ATTNC_LIB=/path/to/libattnc.so" % "; ".join(tried))


_lib, _lib_path = _load()


def _proto(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_P = ctypes.c_void_p
_S = ctypes.c_char_p
_E = ctypes.POINTER(_Err)
_T = ctypes.POINTER(_Tensor)
_I = ctypes.c_int
_compile = _proto("attnc_compile", _P, _S, ctypes.POINTER(_Options), _E)
_source = _proto("attnc_source", _S, _P)
_header = _proto("attnc_header", _S, _P)
_canonical = _proto("attnc_canonical", _S, _P)
_name = _proto("attnc_name", _S, _P)
_kernel_backend = _proto("attnc_kernel_backend", _I, _P)
_release = _proto("attnc_release", None, _P)
_spec_canonical = _proto("attnc_spec_canonical", _I, _S, ctypes.POINTER(_Options), ctypes.c_char_p,
                         ctypes.c_size_t, _E)
_explain = _proto("attnc_explain", _I, _S, ctypes.POINTER(_Options), ctypes.POINTER(_S),
                  ctypes.POINTER(ctypes.c_int64), _I, ctypes.POINTER(_P), _E)
_bindings_new = _proto("attnc_bindings_new", _P, _P)
_bindings_free = _proto("attnc_bindings_free", None, _P)
_bind = _proto("attnc_bind", _I, _P, _S, _T, _E)
_uses = _proto("attnc_uses", _I, _P, _S)
_input_key = _proto("attnc_input_key", _S, _S)
_bind_dim = _proto("attnc_bind_dim", _I, _P, _S, ctypes.c_int64, _E)
_output_shape = _proto("attnc_output_shape", _I, _P, _T, _E)
_output_info = _proto("attnc_output_info", _I, _P, _S, _T, _E)
_bind_output = _proto("attnc_bind_output", _I, _P, _S, _T, _E)
_set_threads = _proto("attnc_bindings_set_threads", _I, _P, _I, _E)
_bindings_threads = _proto("attnc_bindings_threads", _I, _P)
_run = _proto("attnc_run", _I, _P, _T, _E)
_set_seed = _proto("attnc_bindings_set_seed", _I, _P, ctypes.c_uint64, _E)
_kernel_trains = _proto("attnc_kernel_trains", _I, _P)
_grad = _proto("attnc_grad", _I, _P, _T, _T, _E)
_grad_name = _proto("attnc_grad_name", _S, _P, _I)
_grad_get = _proto("attnc_grad_get", _I, _P, _S, _T, _E)
_dim_count = _proto("attnc_dim_count", _I, _P)
_dim_name = _proto("attnc_dim_name", _S, _P, _I)
_inplace_name = _proto("attnc_inplace_name", _S, _P, _I, ctypes.POINTER(ctypes.c_int))
_isa = _proto("attnc_isa", _S)
_st_open = _proto("attnc_st_open", _P, _S, _E)
_st_count = _proto("attnc_st_count", ctypes.c_size_t, _P)
_st_name = _proto("attnc_st_name", _S, _P, ctypes.c_size_t)
_st_get = _proto("attnc_st_get", _I, _P, ctypes.c_size_t, _T)
_st_close = _proto("attnc_st_close", None, _P)
_st_write = _proto("attnc_st_write", _I, _S, ctypes.c_size_t, ctypes.POINTER(_S), _T, _E)
_quantize = _proto("attnc_quantize_int8", _I, _T, _P, _P, _E)
_dtype_size = _proto("attnc_dtype_size", ctypes.c_size_t, _I)
_libc_free = ctypes.CDLL(None).free  # for the strings attnc_explain mallocs
_libc_free.argtypes = [_P]
_libc_free.restype = None


def library_path():
    """The path libattnc.so was loaded from."""
    return _lib_path


def isa():
    """The vectorised primitives this CPU uses: "avx512", "avx2" or "generic"."""
    return _isa().decode()


def _check(status, err):
    if status != 0:
        raise err.error()


def _options(backend, threads, form, spec_name=None):
    if backend not in _BACKENDS:
        raise Error("unknown backend %r (use \"tcc\", \"cc\" or None for $ATTNC_BACKEND, else tcc)" % (backend,))
    if form not in _FORMS:
        raise Error("unknown form %r (use \"fast\" or \"plain\")" % (form,))
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                or threads < 0 or threads > 1024):
        raise Error("threads must be None (the default: $ATTNC_THREADS, else every CPU) or 0 .. 1024, got %r"
                    % (threads,))
    o = _Options()
    o.backend = _BACKENDS[backend]
    o.threads = threads or 0
    o.spec_name = spec_name.encode() if spec_name else None
    o.form = _FORMS[form]
    return o


def _spec_bytes(spec):
    if not isinstance(spec, str):
        raise Error("the spec must be a str, got %s" % type(spec).__name__)
    return spec.encode("utf-8")


def canonical(spec, spec_name=None):
    """The canonical form of a spec (the kernel cache key), without compiling it."""
    err = _Err()
    buf = ctypes.create_string_buffer(1 << 16)
    _check(_spec_canonical(_spec_bytes(spec), _options(None, None, "fast", spec_name), buf, len(buf),
                           ctypes.byref(err)), err)
    return buf.value.decode()


def explain(spec, dims=None):
    """What `attnc explain` prints: every tensor with its shape and bytes, FLOPs.

    dims maps named dims to sizes ({"B": 2, "S": 128}); without all of them
    the text says so instead of giving numbers.
    """
    dims = dict(dims or {})
    names = (_S * max(1, len(dims)))(*[str(n).encode() for n in dims])
    values = (ctypes.c_int64 * max(1, len(dims)))(*[int(v) for v in dims.values()])
    text = _P()
    err = _Err()
    _check(_explain(_spec_bytes(spec), None, names, values, len(dims), ctypes.byref(text), ctypes.byref(err)), err)
    try:
        return ctypes.string_at(text.value).decode()
    finally:
        _libc_free(text)


# ---- arrays ----

def _is_ml_bf16(dtype):
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def _prepare(name, value):
    """(array, attnc dtype code, copied): value as an array attnc can point at.

    Zero-copy when value is a numpy array that is C-contiguous, aligned, in
    the machine's byte order and of a dtype attnc takes; otherwise a C-order
    copy of the same dtype (the library converts dtypes itself, see
    docs/python.md).  A uint16 array is bfloat16 bits, except for the
    integer inputs (mask, q_pos, k_pos), where it is U16.
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if _is_ml_bf16(arr.dtype):
        arr = arr.view(np.uint16)
    native = arr.dtype if arr.dtype.isnative else arr.dtype.newbyteorder("=")
    code = _CODE_OF.get(native)
    if code is None:
        raise Error("tensor '%s' has numpy dtype %s, which attnc does not take (float32, float64, float16, "
                    "bfloat16 as uint16 or ml_dtypes.bfloat16; int8 weights; bool and integer masks and "
                    "positions)" % (name, arr.dtype), 4)
    if code == _BF16 and name.rsplit(".", 1)[-1] in _INTEGER_INPUTS:
        code = _U16
    if arr.ndim > MAX_RANK:
        raise Error("tensor '%s' has rank %d; at most %d is supported" % (name, arr.ndim, MAX_RANK), 4)
    copied = arr.dtype != native or not arr.flags.c_contiguous or not arr.flags.aligned
    if copied:
        arr = np.array(arr, dtype=native, order="C", copy=True)
    return arr, code, copied


def _tensor(arr, code):
    t = _Tensor()
    t.dtype = code
    t.rank = arr.ndim
    for i, n in enumerate(arr.shape):
        t.shape[i] = n
    t.data = arr.ctypes.data
    return t


def _empty(t, bf16_dtype=None):
    """A new 64-byte aligned C-order array for an output the library described in t."""
    dtype = np.dtype(_NUMPY_OF[t.dtype])
    shape = tuple(t.shape[i] for i in range(t.rank))
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    arr = raw[off:off + n].view(dtype).reshape(shape)
    if t.dtype == _BF16 and bf16_dtype is not None:
        arr = arr.view(bf16_dtype)
    return arr


def bf16_to_float32(a):
    """bfloat16 values (uint16 bits, or an ml_dtypes.bfloat16 array) as float32, exactly."""
    a = np.asarray(a)
    if _is_ml_bf16(a.dtype):
        a = a.view(np.uint16)
    if a.dtype != np.uint16:
        raise Error("bf16_to_float32 takes uint16 bits or ml_dtypes.bfloat16, got %s" % a.dtype)
    return np.asarray(a.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16(a):
    """float values rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as uint16 bits.

    The rounding attnc applies when an F32 tensor is bound to a bf16 kernel.
    """
    f = np.ascontiguousarray(a, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = np.isnan(f)
    out = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)
    return out.reshape(f.shape)


def _cache_array(name, value, code):
    """(array to bind, copied): a cache the kernel writes in place, in its dtype exactly.

    A C-contiguous, aligned, writable numpy array of the cache's dtype (bf16:
    uint16 bits or ml_dtypes.bfloat16) is bound as it is, so the run updates
    it in place; anything else is copied into a new array of that dtype
    (floats rounded to bf16 or f16 as attnc rounds), and the copy is updated.
    """
    want = np.dtype(_NUMPY_OF[code])
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if _is_ml_bf16(arr.dtype):
        arr = arr.view(np.uint16)
    if (isinstance(value, np.ndarray) and arr.dtype == want and arr.dtype.isnative and arr.flags.c_contiguous
            and arr.flags.aligned and arr.flags.writeable):
        return arr, False
    if code == _I8 and arr.dtype != np.int8:
        raise Error("tensor '%s' has numpy dtype %s but the spec's cache is kv_dtype=int8: pass int8 values, "
                    "with their F32 per-row scales as %s_scale" % (name, arr.dtype, name), 4)
    if arr.dtype == np.uint16 and code != _BF16:
        arr = bf16_to_float32(arr)  # bfloat16 bits
    if code == _BF16:
        return (arr.copy(order="C") if arr.dtype == np.uint16 else float32_to_bf16(arr)), True
    return np.array(arr, dtype=want, order="C", copy=True), True


# ---- kernels ----

class Kernel:
    """A compiled spec.  run() it on numpy arrays; read source, canonical.

    Kernels are immutable and may be run from any number of Python threads
    at once: each run makes its own bindings, and the GIL is released while
    the kernel computes.
    """

    def __init__(self, spec, backend="tcc", threads=None, form="fast", spec_name=None):
        opts = _options(backend, threads, form, spec_name)
        err = _Err()
        self._k = None
        k = _compile(_spec_bytes(spec), ctypes.byref(opts), ctypes.byref(err))
        if not k:
            raise err.error()
        self._k = k
        self.spec = spec
        self.threads = threads
        self.form = form
        self.source = _source(k).decode()
        self.header = _header(k).decode()
        self.canonical = _canonical(k).decode()
        self.name = _name(k).decode()
        self.backend = _BACKEND_NAMES.get(_kernel_backend(k), "?")
        self.dims = tuple(_dim_name(k, i).decode() for i in range(_dim_count(k)))
        # the inputs the kernel updates in place (a KV cache), with their attnc dtypes
        self.inplace = {}
        while True:
            code = ctypes.c_int()
            n = _inplace_name(k, len(self.inplace), ctypes.byref(code))
            if not n:
                break
            self.inplace[n.decode()] = code.value

    def __del__(self, _release=_release):
        if getattr(self, "_k", None):
            _release(self._k)
            self._k = None

    def __repr__(self):
        return "<attnc.Kernel %s (%s, %s form): %s>" % (self.name, self.backend, self.form, self.canonical)

    def run(self, tensors, prefix="", seed=0, dims=None):
        """Run the kernel; returns {"out": array, "lse" / "attn" when the spec asks for them,
        and a cache spec's caches}.

        tensors maps names (x, kv, bias, mask, q, k, v, q_pos, k_pos, sinks,
        rope_freqs, and the weights under any naming scheme) to arrays.
        With a prefix ("model.layers.0.self_attn."), PREFIX + a name binds as
        that name, inputs bind with or without it, and every other name
        (another layer's tensors) is ignored; without one, every name must
        be one the kernel uses.  dims sets named dims ({"S": 5}) that are
        otherwise inferred from the tensors.  seed (0 .. 2^64-1) is the
        dropout seed of a spec with train dropout=P; other specs ignore it.

        A cache spec (cache=CAP) also takes k_cache, v_cache (and with
        kv_dtype=int8 k_cache_scale, v_cache_scale) and cache_len.  The run
        writes the new rows into the caches: a C-contiguous, aligned,
        writable array of the cache's dtype is updated in place; any other
        is copied and the copy updated.  Either way the result holds each
        cache under its plain name ("k_cache", ...), the very array given
        when it was updated in place.  The caller then adds the new rows'
        count to cache_len.
        """
        return self._call(tensors, prefix, seed, dims, None)

    def grad(self, tensors, dout, seed=0, prefix="", dims=None):
        """Forward and backward of a train spec: {"out": ..., "grad.NAME": ...}.

        tensors, prefix, seed and dims as for run; dout is the gradient of
        out (out's shape, any float dtype).  The result holds "out" (and
        "lse" / "attn" when the spec asks for them) and, for every
        differentiable tensor given (x, kv, q, k, v, bias, sinks, each
        weight and projection bias; not mask, positions or rope_freqs),
        "grad." + its key exactly as given (prefix included): an array of
        that tensor's shape (in_proj_weight whole) in the kernel's dtype,
        float32 (float64 with dtype=f64; with dtype=bf16 or f16 as run
        returns those, the backward computing in f32), whatever dtype it
        was given in.
        A spec without train raises attnc.Error (compile it with " train"
        added).  The backward runs on the kernel's threads (the fast
        form), with the GIL released.
        """
        if not _kernel_trains(self._k):
            err = _Err()
            b = _bindings_new(self._k)
            if not b:
                raise Error("out of memory for the bindings", 8)
            try:  # the library's message: the spec lacks train
                _check(_grad(b, None, None, ctypes.byref(err)), err)
            finally:
                _bindings_free(b)
        if dout is None:  # else _call would run the forward alone and return no gradient
            raise Error("grad needs dout, the gradient of out: an array of out's shape and a float dtype", 5)
        return self._call(tensors, prefix, seed, dims, dout)

    def _call(self, tensors, prefix, seed, dims, dout):
        """run (dout None) or grad: bind, describe the outputs, call the library."""
        what = "grad" if dout is not None else "run"
        if not hasattr(tensors, "items"):
            raise Error("%s takes a dict of name -> array, got %s" % (what, type(tensors).__name__))
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0 or seed >= 1 << 64:
            raise Error("seed must be an integer in 0 .. 2^64-1, got %r" % (seed,))
        err = _Err()
        b = _bindings_new(self._k)
        if not b:
            raise Error("out of memory for the bindings", 8)
        keep = []  # every array the bindings point at, alive until the call returns
        caches = {}  # name -> the array the kernel writes (the caller's, or a copy)
        given = {}  # the name each tensor bound as -> its key in tensors
        bf16_dtype = None
        try:
            _check(_set_threads(b, self.threads or 0, ctypes.byref(err)), err)
            _check(_set_seed(b, int(seed), ctypes.byref(err)), err)
            for dname, value in (dims or {}).items():
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                    raise Error("dim %s must be an integer, got %r" % (dname, value), 4)
                _check(_bind_dim(b, str(dname).encode(), int(value), ctypes.byref(err)), err)
            for key, value in tensors.items():
                if not isinstance(key, str):
                    raise Error("tensor names are str, got %r" % (key,), 4)
                name = key
                if prefix and key.startswith(prefix):
                    name = key[len(prefix):]
                elif prefix and key not in _INPUTS:
                    continue  # a tensor of another layer
                use = _uses(self._k, name.encode())
                if use != 1:
                    # DESIGN.md: tensors the spec does not use are ignored; an
                    # input it does not read, or a name attnc does not know,
                    # is said, since the result may differ from the model's
                    reader = _input_key(name.encode()) if use == 0 else None
                    if reader:
                        warnings.warn("attnc: ignored the input '%s': this spec does not read it (%s would), so the "
                                      "result may differ from the model's" % (key, reader.decode()), stacklevel=3)
                    elif use < 0 and not prefix:
                        warnings.warn("attnc: ignored '%s': no tensor attnc knows has that name (inputs: %s; weights: "
                                      "linear_q.weight, q_proj.weight, in_proj_weight, ...)" % (key, ", ".join(_INPUTS)),
                                      stacklevel=3)
                    continue
                if isinstance(value, np.ndarray) and _is_ml_bf16(value.dtype):
                    bf16_dtype = value.dtype
                if name in self.inplace:
                    code = self.inplace[name]
                    arr, copied = _cache_array(name, value, code)
                    if not copied:
                        caches[name] = value
                    elif code == _BF16 and isinstance(value, np.ndarray) and _is_ml_bf16(value.dtype):
                        caches[name] = arr.view(value.dtype)
                    else:
                        caches[name] = arr
                else:
                    arr, code, _ = _prepare(name, value)
                keep.append(arr)
                t = _tensor(arr, code)
                _check(_bind(b, name.encode(), ctypes.byref(t), ctypes.byref(err)), err)
                given[name] = key
            out_t = _Tensor()
            _check(_output_shape(b, ctypes.byref(out_t), ctypes.byref(err)), err)
            outs = {"out": _empty(out_t, bf16_dtype)}
            out_t.data = outs["out"].ctypes.data
            for oname in _EXTRA_OUTPUTS:
                t = _Tensor()
                status = _output_info(b, oname.encode(), ctypes.byref(t), ctypes.byref(err))
                if status == 9:  # ATTNC_EARG: the spec does not ask for this output
                    continue
                _check(status, err)
                outs[oname] = _empty(t)
                t.data = outs[oname].ctypes.data
                _check(_bind_output(b, oname.encode(), ctypes.byref(t), ctypes.byref(err)), err)
            if dout is None:
                # the GIL is released for the length of this call (ctypes.CDLL)
                _check(_run(b, ctypes.byref(out_t), ctypes.byref(err)), err)
                outs.update(caches)
                return outs
            darr, dcode, _ = _prepare("dout", dout)
            dt = _tensor(darr, dcode)
            _check(_grad(b, ctypes.byref(out_t), ctypes.byref(dt), ctypes.byref(err)), err)
            i = 0
            while True:
                gname = _grad_name(b, i)
                if not gname:
                    break
                t = _Tensor()
                _check(_grad_get(b, gname, ctypes.byref(t), ctypes.byref(err)), err)
                dtype = np.dtype(_NUMPY_OF[t.dtype])
                shape = tuple(t.shape[j] for j in range(t.rank))
                n = int(np.prod(shape, dtype=np.int64))
                # a copy: the bindings own the buffer, and are freed below
                arr = np.empty(shape, dtype=dtype)
                if n:
                    ctypes.memmove(arr.ctypes.data, t.data, n * dtype.itemsize)
                name = gname.decode()
                outs["grad." + given.get(name, name)] = arr
                i += 1
            return outs
        finally:
            _bindings_free(b)


def compile(spec, backend="tcc", threads=None, form="fast", spec_name=None):
    """Compile a spec into a Kernel.

    backend: "tcc" (libtcc, in memory: milliseconds), "cc" (the system C
    compiler at -O3, cached on disk) or None ($ATTNC_BACKEND, else tcc).
    threads: threads per run, None for $ATTNC_THREADS, else every CPU;
    results are the same bits for any count.  form: "fast" (tiles,
    vectorised primitives, threads) or "plain" (one function per step, one
    thread; computes the same).  spec_name replaces "spec" in error positions.
    A bad spec raises attnc.Error with its position.
    """
    return Kernel(spec, backend=backend, threads=threads, form=form, spec_name=spec_name)


# ---- safetensors and int8 weights ----

def load_safetensors(path):
    """Every tensor of a safetensors file, as {name: numpy array} (copies).

    BF16 tensors come as uint16 arrays of their bits (bf16_to_float32 widens
    them); the reader is the library's, which checks every size and offset.
    """
    err = _Err()
    f = _st_open(os.fsencode(path), ctypes.byref(err))
    if not f:
        raise err.error()
    try:
        out = {}
        for i in range(_st_count(f)):
            t = _Tensor()
            name = _st_name(f, i).decode("utf-8")
            status = _st_get(f, i, ctypes.byref(t))
            if status != 0:
                raise Error("cannot read tensor '%s' of %s" % (name, path), status)
            shape = tuple(t.shape[j] for j in range(t.rank))
            dtype = np.dtype(_NUMPY_OF[t.dtype])
            n = int(np.prod(shape, dtype=np.int64))
            data = ctypes.string_at(t.data, n * dtype.itemsize) if n else b""
            out[name] = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        return out
    finally:
        _st_close(f)


def save_safetensors(path, tensors):
    """Write {name: array} to a safetensors file, atomically (the library's writer).

    Dtypes as for Kernel.run: a uint16 array is written as BF16, except
    under the names mask, q_pos, k_pos (or NAME ending in .mask, ...), as U16.
    """
    names, keep, ts = [], [], (_Tensor * max(1, len(tensors)))()
    for i, (name, value) in enumerate(tensors.items()):
        arr, code, _ = _prepare(name, value)
        keep.append(arr)
        ts[i] = _tensor(arr, code)
        names.append(name.encode("utf-8"))
    cnames = (_S * max(1, len(names)))(*names)
    err = _Err()
    _check(_st_write(os.fsencode(path), len(names), cnames, ts, ctypes.byref(err)), err)


def quantize_int8(w):
    """(q int8 (out, in), scale float32 (out)) for a weight (out, in), as `attnc quantize` makes them.

    Bind q under the weight's name and scale under NAME + "_scale" to a
    weights=int8 kernel.
    """
    arr, code, _ = _prepare("weight", w)
    if arr.ndim != 2:
        raise Error("quantize_int8 takes a 2-D weight (out, in), got shape %s" % (arr.shape,), 9)
    q = np.empty(arr.shape, dtype=np.int8)
    scale = np.empty(arr.shape[0], dtype=np.float32)
    t = _tensor(arr, code)
    err = _Err()
    _check(_quantize(ctypes.byref(t), q.ctypes.data, scale.ctypes.data, ctypes.byref(err)), err)
    return q, scale

