#!/usr/bin/python3
"""Gradient audit of attnc against a float64 PyTorch-autograd oracle.

Drives `build/attnc grad` (of the repository this script sits in) over a
list of training specs and compares `out`, `lse`, `attn` and every
`grad.NAME` with tools/audit/grad_oracle.py, which is written from
/work/shared/DESIGN.md ("Precision" accuracy rows, "Training": dropout with
the Philox4x32-10 keep rule, gradients of every differentiable tensor, a
broadcast bias's gradient summed), not from attnc's code.

What it checks, per case and per configuration (backend tcc|cc, threads
1-4, ATTNC_ISA=generic|avx2|avx512 where the CPU has it or the default
choice, ATTNC_NO_PRIMS=1, the plain form):
  - out, lse (F32), attn (F32) and every gradient within DESIGN.md's row
    (f32: out 1e-5 + 1e-4|r| and NMSE 1e-10; f32 gradients 1e-4 rms +
    1e-4|r| and NMSE 1e-8; f64: 1e-9 rms + 1e-9|r|); a gradient that is
    zero in exact arithmetic (the k bias) against its sibling's scale;
  - the written names: grad.NAME exactly as read (prefix included), none
    missing, none extra (no grad for mask, positions, rope_freqs, or another
    layer's weights), in the kernel's dtype;
  - the same bits for every thread count of one backend, ISA and form;
  - dropout: Philox4x32-10's known answers; the keep mask, extracted with
    v = identity, bit for bit against the rule for several p and seeds
    (0, 2^32 + 5, 2^64 - 1, ...), batch axes flattened row-major, both
    layouts, both dtypes, every backend/ISA/thread count; kept values scaled
    by 1/(1-p); gradients with dropout against the oracle using that mask;
    `dropout=0` bit for bit equal to no dropout, whatever the seed.

Usage (always /usr/bin/python3; numpy and torch needed; `make` first):
  /usr/bin/python3 tools/audit/grad_audit.py --quick        # under 1 minute on 2 cores (46 cases)
  /usr/bin/python3 tools/audit/grad_audit.py                # full audit, about 4 minutes (270 cases)
  /usr/bin/python3 tools/audit/grad_audit.py --list [--quick]
  /usr/bin/python3 tools/audit/grad_audit.py --case 'rope-*' --config tcc:2:avx2
Options:
  --quick             the short case list (else the full one)
  --out PATH          results, one JSON object per check (default
                      build/grad_audit/results.jsonl; the summary goes to
                      PATH with .summary.txt appended too)
  --case GLOB         only cases whose tag matches (repeatable; any list)
  --config SPEC       run these configurations instead of each case's own
                      (repeatable): BACKEND:THREADS[:ISA[:plain]], ISA one of
                      default, generic, avx2, avx512, noprims
  --attnc PATH        the attnc binary (default build/attnc beside tools/)
  --cc-cache DIR      ATTNC_CACHE_DIR for the cc backend (default: a fresh
                      directory under the work dir, removed at the end, so
                      every cc kernel is compiled)
  --keep              keep every case's input files (failures' are always kept)
  -j N                cases run N at a time (default 1)
  --list              print the cases and their configurations, run nothing
Exit status 0 when every check passes, 1 otherwise.
Each failure is printed with its spec, configuration, tensor, ratio and two
commands to reproduce it: this script on that one case and configuration,
and the attnc command on the kept input files.
"""
import argparse
import concurrent.futures
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import grad_oracle as O  # noqa: E402

try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # grad_oracle already needs it; say how to get it
    sys.exit('grad_audit: needs torch for /usr/bin/python3 (apt-get install python3-torch)')

PY = '/usr/bin/python3'
REPRO_FLAGS = ''  # --quick / --attnc of this run, for the repro commands


def audit_cmd(tag, *configs):
    """The command that reruns one case (in some configurations) of this audit."""
    return '%s tools/audit/grad_audit.py%s --case %s%s' % (PY, REPRO_FLAGS, shlex.quote(tag),
                                                          ''.join(' --config %s' % c for c in configs))
ISAS = ('default', 'generic', 'avx2', 'avx512', 'noprims')


# ---------------------------------------------------------------- CPU
def cpu_flags():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('flags'):
                    return set(line.split(':', 1)[1].split())
    except OSError:
        pass
    return set()


FLAGS = cpu_flags()
HAVE = {'default': True, 'generic': True, 'noprims': True,
        'avx2': {'avx2', 'fma'} <= FLAGS,
        'avx512': {'avx512f', 'avx512dq', 'avx512bw', 'avx512vl', 'fma'} <= FLAGS}


# ---------------------------------------------------------------- configurations
class Config(object):
    __slots__ = ('backend', 'threads', 'isa', 'plain')

    def __init__(self, text):
        p = text.split(':')
        if len(p) < 2 or p[0] not in ('tcc', 'cc') or not p[1].isdigit():
            raise ValueError('config %r: want BACKEND:THREADS[:ISA[:plain]]' % text)
        self.backend, self.threads = p[0], int(p[1])
        self.isa = p[2] if len(p) > 2 and p[2] else 'default'
        if self.isa not in ISAS:
            raise ValueError('config %r: ISA one of %s' % (text, ', '.join(ISAS)))
        self.plain = len(p) > 3 and p[3] == 'plain'

    def __str__(self):
        return '%s:%d:%s%s' % (self.backend, self.threads, self.isa, ':plain' if self.plain else '')

    def family(self):
        """Configurations that must give the same bits: all but the thread count."""
        return (self.backend, self.isa, self.plain)

    def env(self, base):
        e = dict(base)
        for k in ('ATTNC_ISA', 'ATTNC_NO_PRIMS', 'ATTNC_THREADS', 'ATTNC_BACKEND'):
            e.pop(k, None)
        if self.isa == 'noprims':
            e['ATTNC_NO_PRIMS'] = '1'
        elif self.isa != 'default':
            e['ATTNC_ISA'] = self.isa
        return e

    def env_prefix(self):
        if self.isa == 'noprims':
            return 'ATTNC_NO_PRIMS=1 '
        return '' if self.isa == 'default' else 'ATTNC_ISA=%s ' % self.isa

    def args(self):
        return ['--backend', self.backend, '--threads', str(self.threads)] + (['--plain'] if self.plain else [])


def cfgs(*names):
    return [Config(n) for n in names]


BASE = ('tcc:1', 'tcc:2')
STD = BASE + ('cc:2',)
ISA = ('tcc:1:generic', 'tcc:2:generic', 'tcc:1:avx2', 'tcc:2:avx2', 'tcc:1:avx512', 'tcc:2:avx512')
FORMS = ('tcc:1:default:plain', 'tcc:1:noprims', 'tcc:2:noprims')
MATRIX = tuple('%s:%d:%s' % (b, t, i) for b in ('tcc', 'cc') for i in ('default', 'generic', 'avx2', 'avx512')
               for t in (1, 2, 3, 4)) + ('tcc:1:default:plain', 'cc:1:default:plain', 'tcc:1:noprims', 'tcc:3:noprims')
QMATRIX = ('tcc:1', 'tcc:2', 'tcc:3', 'tcc:4', 'tcc:1:generic', 'tcc:4:generic', 'tcc:1:avx2', 'tcc:3:avx2',
           'tcc:1:avx512', 'tcc:2:avx512', 'cc:1', 'cc:4', 'cc:2:avx2', 'cc:2:generic', 'tcc:1:default:plain')


# ---------------------------------------------------------------- cases
class Case(object):
    """kind: 'grad' (oracle comparison), 'mask' (dropout keep mask), 'p0'."""

    def __init__(self, tag, kind, c, configs, prefix='', prefix_inputs=False, decoys=False, files=1, mask=None):
        self.tag, self.kind, self.c, self.configs = tag, kind, c, configs
        self.prefix, self.prefix_inputs, self.decoys, self.files = prefix, prefix_inputs, decoys, files
        self.mask = mask  # mask cases: dict(batch, H, G, Sq, Sk, p, seed, dtype, layout)

    @property
    def rngseed(self):
        return zlib.crc32(self.tag.encode())


def build_cases(quick):
    D = O.case
    L = []

    def add(tag, configs, prefix='', prefix_inputs=False, decoys=False, files=1, **kw):
        L.append(Case(tag, 'grad', D(**kw), cfgs(*configs), prefix, prefix_inputs, decoys, files))

    def addmask(tag, configs, **m):
        L.append(Case(tag, 'mask', None, cfgs(*configs), mask=m))

    if quick:
        QB = ('tcc:1', 'tcc:2', 'tcc:3:generic', 'tcc:2:avx2', 'cc:2')
        QC = ('tcc:1', 'tcc:2', 'cc:2')
        for dt in ('f32', 'f64'):
            add('full-mha-%s' % dt, QB, x=(2, 7, 24), H=3, c=8, dtype=dt)
            add('full-gqa-causal-%s' % dt, QB, x=(2, 9, 32), H=4, G=2, c=8, dtype=dt, causal='top_left')
            add('core-gqa-%s' % dt, QB, mode='core', q=(2, 4, 9, 16), kvs=(2, 2, 11, 16), H=4, G=2, c=16, dtype=dt,
                causal='bottom_right')
        add('full-mqa', QB, x=(1, 5, 16), H=4, G=1, c=8, preset='mqa')
        add('full-cross-mask', QB, x=(2, 5, 16), kv=(2, 11, 20), H=2, c=8, mask=True)
        add('af-gated-pairbias', QB, x=(2, 3, 6, 16), H=2, c=8, gated=True, names='af', preset='alphafold',
            qkv_bias=False, bias=(2, 1, 2, 6, 6), mask=True)
        add('af-col-axis-3', QB, x=(5, 4, 16), attn_dim=-3, H=2, c=8, gated=True, names='af',
            preset='alphafold', qkv_bias=False, mask=True, bias=(2, 5, 5))
        add('af-global-masked-gated', QB, x=(3, 7, 16), H=4, c=8, names='af', preset='alphafold',
            qkv_bias=False, glob=True, global_mean='masked', gated=True, mask=True)
        add('af-global-plain-f64', QB, x=(3, 7, 16), H=4, c=8, names='af', preset='alphafold', qkv_bias=False,
            glob=True, mask=True, dtype='f64')
        add('window-bottom_right', QB, x=(2, 19, 16), H=2, c=8, causal='bottom_right', window=(3, 0))
        add('rope-neox-partial-freqs', QB, x=(2, 9, 32), H=2, c=16, rope='neox', rope_dim=8, rope_freqs=True,
            theta=500000.0, causal='top_left')
        add('rope-gptj-f64', QB, mode='core', q=(2, 2, 6, 16), kvs=(2, 1, 9, 16), H=2, G=1, c=16, rope='gptj',
            dtype='f64')
        add('rope-farpos', QB, mode='core', q=(1, 2, 4, 16), kvs=(1, 2, 6, 16), H=2, c=16, rope='gptj',
            q_pos=[32760, 32761, 32767, 100000], k_pos=[0, 5, 32000, 32767, 70000, 99999], pos_dtype='I32')
        add('alibi-H6', QB, x=(2, 9, 48), H=6, c=8, alibi=8.0, causal='top_left')
        add('softcap', QB, x=(2, 9, 16), H=2, c=8, softcap=5.0, causal='top_left', wscale=6.0)
        add('sinks-lse', QB, x=(2, 9, 32), H=4, G=2, c=8, sinks=True, causal='top_left', window=(3, 0), lse=True)
        add('bshc-core', QB, mode='core', q=(2, 7, 4, 8), kvs=(2, 9, 2, 8), H=4, G=2, c=8, layout='bshc',
            causal='bottom_right', lse=True)
        add('inproj-gqa', QB, x=(2, 6, 32), H=4, G=2, c=8, names='inproj', causal='top_left')
        add('prefix-decoys', QB, prefix='model.layers.1.self_attn.', decoys=True, files=2, x=(2, 7, 16), H=2,
            c=8, mask=True, mask_dtype='BOOL')
        add('weights-out-f16-file', QB, x=(2, 7, 16), H=2, c=8, weights_out=True, lse=True, store='F16',
            causal='top_left')
        add('combo-all', QMATRIX, x=(2, 11, 32), H=4, G=2, c=8, rope='neox', rope_dim=4, alibi=4.0, softcap=20.0,
            sinks=True, lse=True, mask=True, bias=(4, 11, 11), causal='top_left', window=(5, 0))
        add('big-core-257', QMATRIX, mode='core', q=(1, 4, 257, 64), kvs=(1, 2, 257, 64), H=4, G=2, c=64,
            causal='top_left')
        for i, s in enumerate((0, 2 ** 32 + 5, 2 ** 64 - 1)):
            add('drop-full-seed%d' % i, QB if i == 0 else QC, x=(2, 9, 16), H=2, c=8, dropout=0.2,
                seed=s, causal='top_left')
        add('bias-shared-bcast', QB, x=(2, 7, 16), H=2, c=8, bias=(1, 7, 7))
        add('empty-rows-mask', QB, x=(3, 6, 16), H=2, c=8, mask=True, empty_rows_ok=True, causal='top_left')
        add('decode-core-mqa', QB, mode='core', q=(2, 8, 1, 64), kvs=(2, 1, 257, 64), H=8, G=1, c=64, mask=True)
        add('rope-bshc-gptj', QB, mode='core', q=(2, 6, 2, 16), kvs=(2, 9, 1, 16), H=2, G=1, c=16, rope='gptj',
            layout='bshc')
        add('inproj-f64', QC, x=(2, 6, 16), H=2, c=8, names='inproj', dtype='f64')
        add('file-BF16-into-f32', QC, x=(2, 7, 16), H=2, c=8, store='BF16', bias=(2, 7, 7), sinks=True)
        add('prefix-core', QC, prefix='attn.', prefix_inputs=True, decoys=True, mode='core', q=(2, 2, 5, 8),
            kvs=(2, 1, 9, 8), H=2, G=1, c=8)
        add('drop-global', QB, x=(3, 7, 16), H=2, c=8, names='af', preset='alphafold', qkv_bias=False, glob=True,
            gated=True, mask=True, dropout=0.25, seed=11)
        add('drop-core-f64-bias', QB, mode='core', q=(2, 4, 5, 8), kvs=(2, 2, 9, 8), H=4, G=2, c=8,
            bias=(2, 1, 5, 9), dropout=0.3, seed=2 ** 40 + 3, dtype='f64')
        add('drop-big-matrix', QMATRIX, mode='core', q=(1, 4, 257, 32), kvs=(1, 2, 257, 32), H=4, G=2, c=32,
            dropout=0.1, seed=99, causal='top_left')
        mcfg = ('tcc:1', 'tcc:3', 'tcc:1:generic', 'tcc:2:avx2', 'tcc:1:avx512', 'cc:4', 'tcc:1:default:plain')
        for p in (0.1, 0.5, 0.9):
            for s in (0, 2 ** 64 - 1):
                addmask('mask-p%g-s%s' % (p, 'max' if s else '0'), mcfg, batch=(2, 3), H=2, G=1, Sq=9, Sk=13, p=p,
                        seed=s, dtype='f32', layout='bhsc')
        addmask('mask-bshc-f64', ('tcc:1', 'tcc:2'), batch=(3,), H=4, G=2, Sq=5, Sk=7, p=0.5, seed=123456789012345,
                dtype='f64', layout='bshc')
        L.append(Case('p0-equals-no-dropout', 'p0', D(x=(2, 9, 16), H=2, c=8, causal='top_left'),
                      cfgs('tcc:1', 'tcc:2')))
        return L

    # ------------------------------------------------------------ full list
    ALL = STD + ('cc:1', 'tcc:2:generic', 'tcc:2:avx2', 'tcc:2:avx512')
    # full mode basics, both dtypes
    for dt in ('f32', 'f64'):
        add('full-mha-%s' % dt, ALL, x=(2, 7, 24), H=3, c=8, dtype=dt)
        add('full-gqa-%s' % dt, ALL, x=(2, 9, 32), H=4, G=2, c=8, dtype=dt, causal='top_left')
        add('full-mqa-%s' % dt, ALL, x=(1, 5, 16), H=4, G=1, c=8, dtype=dt, preset='mqa')
        add('full-gqa-preset-%s' % dt, STD, x=(2, 6, 32), H=4, G=2, c=8, dtype=dt, preset='gqa')
        add('full-cross-%s' % dt, ALL, x=(2, 5, 16), kv=(2, 11, 20), H=2, c=8, dtype=dt, mask=True)
        add('full-gated-af-%s' % dt, ALL, x=(2, 3, 6, 16), H=2, c=8, dtype=dt, gated=True, names='af',
            preset='alphafold', qkv_bias=False, bias=(2, 1, 2, 6, 6), mask=True)
        add('full-inproj-%s' % dt, ALL, x=(2, 6, 16), H=2, c=8, dtype=dt, names='inproj')
    # heads, head_dim, lengths
    for H, G in ((1, 1), (2, 1), (4, 4), (4, 2), (4, 1), (6, 3), (8, 2), (8, 4), (3, 3), (5, 1)):
        add('gqa-H%dG%d' % (H, G), BASE, x=(2, 7, 20), H=H, G=G, c=8, causal='top_left', mask=True)
    for ch in (8, 12, 13, 17, 31, 64, 96, 128):
        add('hd%d' % ch, STD, x=(1, 9, 24), H=2, c=ch, causal='top_left')
        add('core-hd%d' % ch, STD, mode='core', q=(1, 2, 9, ch), kvs=(1, 1, 11, ch), H=2, G=1, c=ch)
    for S in (1, 2, 3, 17, 33, 257):
        add('len%d' % S, STD, x=(1, S, 32), H=2, G=1, c=16, causal='top_left', mask=True)
        add('core-len%d' % S, STD, mode='core', q=(2, 4, S, 16), kvs=(2, 2, S, 16), H=4, G=2, c=16,
            causal='top_left')
    add('big-full-257', STD + ('tcc:2:generic',), x=(1, 257, 64), H=4, G=2, c=16, causal='top_left', mask=True)
    add('big-full-f64-130', STD, x=(2, 130, 32), H=2, G=1, c=16, dtype='f64', mask=True)
    add('x-2d', STD, x=(9, 16), H=2, c=8, causal='top_left')
    add('x-5d-bias', STD, x=(2, 2, 3, 5, 8), H=2, c=4, bias=(2, 1, 3, 2, 5, 5), mask=True, names='af',
        preset='alphafold', gated=True)
    add('hd-odd-full-H8', STD, x=(2, 17, 40), H=8, G=4, c=9, causal='top_left', mask=True)
    add('mqa-hd128-f64', STD, x=(1, 33, 64), H=4, G=1, c=128, dtype='f64', causal='top_left', preset='mqa')
    add('core-odd-all', STD, mode='core', q=(3, 3, 7, 11), kvs=(3, 1, 5, 11), H=3, G=1, c=11,
        causal='bottom_right', mask=True)
    add('decode-core', STD, mode='core', q=(2, 8, 1, 64), kvs=(2, 1, 257, 64), H=8, G=1, c=64, mask=True)
    add('decode-core-br-window', STD, mode='core', q=(1, 8, 3, 32), kvs=(1, 2, 257, 32), H=8, G=2, c=32,
        causal='bottom_right', window=(16, 0))
    # causal, window, empty rows
    for cz in ('top_left', 'bottom_right'):
        add('core-cross-causal-%s' % cz, STD, mode='core', q=(2, 2, 5, 8), kvs=(2, 2, 13, 8), H=2, c=8, causal=cz)
        add('core-cross-causal-%s-q>k' % cz, STD, mode='core', q=(2, 2, 13, 8), kvs=(2, 2, 5, 8), H=2, c=8,
            causal=cz)
        add('full-cross-causal-%s' % cz, BASE, x=(2, 5, 16), kv=(2, 9, 16), H=2, c=8, causal=cz)
        add('window-%s' % cz, STD, x=(2, 19, 16), H=2, c=8, causal=cz, window=(3, 0))
    add('window-sym', STD, x=(2, 19, 16), H=2, c=8, window=(2, 3))
    add('window-core-cross', BASE, mode='core', q=(1, 2, 7, 8), kvs=(1, 2, 19, 8), H=2, c=8, window=(2, 1))
    add('window-core-br', BASE, mode='core', q=(1, 2, 7, 8), kvs=(1, 2, 19, 8), H=2, c=8, window=(2, 1),
        causal='bottom_right')
    add('gqa-bias-window-cross', STD, x=(2, 5, 16), kv=(2, 12, 24), H=4, G=2, c=8, bias=(4, 5, 12), window=(2, 2),
        causal='bottom_right')
    add('empty-rows-mask', STD, x=(3, 6, 16), H=2, c=8, mask=True, empty_rows_ok=True, causal='top_left')
    add('empty-rows-window', BASE, mode='core', q=(1, 2, 4, 8), kvs=(1, 2, 19, 8), H=2, c=8, window=(0, 0),
        causal='top_left', lse=True)
    # masks: dtypes and shapes
    add('mask-bool', BASE, x=(2, 7, 16), H=2, c=8, mask=True, mask_dtype='BOOL')
    add('mask-f32', BASE, x=(2, 7, 16), H=2, c=8, mask=True, mask_dtype='F32')
    add('mask-shape-short', STD, x=(2, 3, 7, 16), H=2, c=8, mask=True, mask_shape=(7,))
    # bias broadcasting (gradient summed over the broadcast axes)
    add('bias-perhead', STD, x=(2, 7, 16), H=2, c=8, bias=(2, 7, 7))
    add('bias-shared', STD, x=(2, 7, 16), H=2, c=8, bias=(1, 7, 7))
    add('bias-batch', STD, x=(2, 7, 16), H=2, c=8, bias=(2, 2, 7, 7))
    add('bias-bcast-q', BASE, x=(2, 7, 16), H=2, c=8, bias=(2, 2, 1, 7))
    add('bias-bcast-k', BASE, x=(2, 7, 16), H=2, c=8, bias=(2, 2, 7, 1))
    add('bias-all1', STD, x=(2, 7, 16), H=2, c=8, bias=(1, 1, 1))
    add('bias-4d-lead', STD, x=(2, 3, 7, 16), H=2, c=8, bias=(2, 1, 2, 7, 7))
    add('bias-4d-none-gated', BASE, x=(2, 3, 7, 16), H=2, c=8, bias=(2, 7, 7), gated=True)
    add('bias-core', STD, mode='core', q=(2, 2, 5, 8), kvs=(2, 1, 9, 8), H=2, G=1, c=8, bias=(2, 1, 5, 9))
    add('bias-core-f64', BASE, mode='core', q=(2, 2, 5, 8), kvs=(2, 1, 9, 8), H=2, G=1, c=8, bias=(1, 2, 5, 9),
        dtype='f64')
    add('bias-big-bcast', STD, x=(2, 3, 65, 32), H=2, c=16, bias=(2, 65, 65), gated=True, names='af',
        preset='alphafold', qkv_bias=False, mask=True)
    # AlphaFold: attention axis, gate, pair bias, key mask, global
    add('af-row', STD + ('tcc:2:generic',), x=(3, 8, 16), H=2, c=8, gated=True, names='af', preset='alphafold',
        qkv_bias=False, bias=(2, 8, 8), mask=True)
    add('af-col-axis-3', STD + ('tcc:2:generic',), x=(5, 4, 16), attn_dim=-3, H=2, c=8, gated=True, names='af',
        preset='alphafold', qkv_bias=False, mask=True, bias=(2, 5, 5))
    add('af-4d-axis1', STD, x=(2, 5, 3, 16), attn_dim=1, H=2, c=8, gated=True, names='af', preset='alphafold',
        qkv_bias=False, mask=True, bias=(2, 1, 2, 5, 5))
    add('af-4d-axis0', BASE, x=(5, 2, 3, 12), attn_dim=0, H=3, c=4, names='af', preset='alphafold', mask=True)
    add('af-axis-f64', BASE, x=(5, 4, 16), attn_dim=-3, H=2, c=8, gated=True, names='af', preset='alphafold',
        qkv_bias=False, mask=True, bias=(2, 5, 5), dtype='f64')
    add('cross-mask-f64-gated', STD, x=(2, 4, 5, 16), kv=(2, 4, 9, 12), H=2, c=8, mask=True, gated=True,
        dtype='f64', names='af', preset='alphafold', bias=(2, 1, 2, 5, 9))
    for gm in ('plain', 'masked'):
        for gated in (False, True):
            for dt in ('f32', 'f64'):
                add('global-%s-g%d-%s' % (gm, gated, dt), STD, x=(3, 7, 16), H=4, c=8, names='af',
                    preset='alphafold', qkv_bias=False, glob=True, global_mean=gm, gated=gated, mask=True, dtype=dt)
        add('global-%s-axis-3-qkvbias' % gm, BASE, x=(6, 3, 16), attn_dim=-3, H=2, c=8, names='af',
            preset='alphafold', glob=True, global_mean=gm, gated=True, mask=True, qkv_bias=True)
    add('global-masked-allmasked-row', STD, x=(3, 7, 16), H=2, c=8, names='af', preset='alphafold', qkv_bias=True,
        glob=True, global_mean='masked', mask=True, empty_rows_ok=True, gated=True)
    # rope
    for style in ('neox', 'gptj'):
        for dt in ('f32', 'f64'):
            add('rope-%s-%s' % (style, dt), STD + ('tcc:2:generic',), x=(2, 9, 32), H=4, G=2, c=16, rope=style,
                causal='top_left', dtype=dt)
            add('core-rope-%s-%s' % (style, dt), STD, mode='core', q=(2, 2, 6, 16), kvs=(2, 1, 9, 16), H=2, G=1,
                c=16, rope=style, dtype=dt)
        add('rope-partial-%s' % style, STD, x=(2, 9, 32), H=2, c=16, rope=style, rope_dim=6, causal='top_left')
        add('rope-freqs-%s' % style, STD, x=(2, 9, 32), H=2, c=16, rope=style, rope_dim=8, rope_freqs=True,
            theta=500000.0)
        add('rope-cross-%s' % style, BASE, x=(2, 5, 32), kv=(2, 8, 24), H=2, c=16, rope=style)
        add('rope-farpos-%s' % style, STD, mode='core', q=(1, 2, 4, 16), kvs=(1, 2, 6, 16), H=2, c=16, rope=style,
            q_pos=[32760, 32761, 32767, 100000], k_pos=[0, 5, 32000, 32767, 70000, 99999])
        add('rope-odd-hd-%s' % style, BASE, mode='core', q=(1, 2, 5, 13), kvs=(1, 2, 5, 13), H=2, c=13,
            rope=style, rope_dim=12)
        add('rope-bshc-%s' % style, STD, mode='core', q=(2, 6, 2, 16), kvs=(2, 9, 1, 16), H=2, G=1, c=16,
            rope=style, layout='bshc')
    add('rope-qpos-batch', STD, mode='core', q=(2, 2, 4, 16), kvs=(2, 2, 6, 16), H=2, c=16, rope='neox',
        q_pos=[[5, 9, 2, 1000], [0, 1, 2, 3]], k_pos=[[0, 1, 2, 3, 4, 5], [50000, 7, 8, 9, 10, 11]], pos_dtype='I32')
    add('rope-alibi-far-full', STD, x=(2, 4, 32), H=2, c=16, rope='gptj', alibi=8.0,
        q_pos=[40000, 40001, 40002, 40003], k_pos=[39990, 39995, 40000, 40003], causal='top_left')
    add('rope-full-f64-far', STD, x=(1, 5, 32), H=2, c=16, rope='neox', dtype='f64',
        q_pos=[32767, 65535, 100000, 1 << 20, 3], k_pos=[32767, 65535, 100000, 1 << 20, 3])
    # alibi
    for H in (1, 3, 4, 6, 8):
        add('alibi-H%d' % H, STD, x=(2, 9, 8 * H), H=H, c=8, alibi=8.0, causal='top_left')
    add('alibi-4-core-f64', BASE, mode='core', q=(2, 5, 5, 8), kvs=(2, 5, 9, 8), H=5, c=8, alibi=4.0, dtype='f64')
    add('alibi-farpos', STD, mode='core', q=(1, 3, 4, 8), kvs=(1, 3, 6, 8), H=3, c=8, alibi=8.0,
        q_pos=[100000, 100001, 100002, 99990], k_pos=[99990, 99995, 100000, 100001, 100002, 50])
    add('alibi-bias-mask', BASE, x=(2, 7, 16), H=2, c=8, alibi=8.0, bias=(2, 7, 7), mask=True)
    add('alibi-sinks-lse', STD, x=(2, 7, 16), H=2, c=8, alibi=2.0, sinks=True, causal='top_left', lse=True)
    add('alibi-cross', BASE, x=(2, 5, 16), kv=(2, 8, 16), H=2, c=8, alibi=8.0)
    add('alibi-big', STD, mode='core', q=(1, 8, 257, 16), kvs=(1, 8, 257, 16), H=8, c=16, alibi=8.0,
        causal='top_left')
    # softcap
    for cap in (5.0, 30.0):
        add('softcap%g' % cap, STD, x=(2, 9, 16), H=2, c=8, softcap=cap, causal='top_left', wscale=6.0)
    add('softcap-f64-bias', BASE, x=(2, 9, 16), H=2, c=8, softcap=3.0, dtype='f64', wscale=4.0, bias=(2, 9, 9))
    add('softcap-core-bias', BASE, mode='core', q=(2, 2, 5, 8), kvs=(2, 2, 7, 8), H=2, c=8, softcap=2.0,
        bias=(2, 5, 7), xscale=3.0)
    add('sharp-softcap-big', STD, mode='core', q=(1, 2, 129, 32), kvs=(1, 2, 129, 32), H=2, c=32, xscale=3.0,
        softcap=10.0, causal='top_left')
    # sinks, lse, weights_out
    for dt in ('f32', 'f64'):
        add('sinks-%s' % dt, STD + ('tcc:2:generic',), x=(2, 9, 32), H=4, G=2, c=8, sinks=True, causal='top_left',
            window=(3, 0), dtype=dt, lse=True)
        add('sinks-core-empty-%s' % dt, STD, mode='core', q=(2, 2, 5, 8), kvs=(2, 2, 9, 8), H=2, c=8, sinks=True,
            dtype=dt, mask=True, empty_rows_ok=True, lse=True)
    add('sinks-only', BASE, x=(2, 7, 16), H=2, c=8, sinks=True)
    add('sinks-empty-full', STD, x=(3, 6, 16), H=2, c=8, sinks=True, mask=True, empty_rows_ok=True, lse=True)
    add('sinks-big', STD, mode='core', q=(1, 4, 257, 16), kvs=(1, 2, 257, 16), H=4, G=2, c=16, sinks=True,
        causal='top_left', lse=True)
    add('lse-core', BASE, mode='core', q=(2, 2, 5, 8), kvs=(2, 2, 9, 8), H=2, c=8, lse=True, causal='top_left')
    add('weights-out-full', STD, x=(2, 7, 16), H=2, c=8, weights_out=True, lse=True, mask=True, causal='top_left')
    add('weights-out-core-f64', STD, mode='core', q=(2, 2, 5, 8), kvs=(2, 1, 9, 8), H=2, G=1, c=8,
        weights_out=True, sinks=True, dtype='f64')
    # layouts
    add('bshc-core', STD + ('tcc:2:generic',), mode='core', q=(2, 7, 4, 8), kvs=(2, 9, 2, 8), H=4, G=2, c=8,
        layout='bshc', causal='bottom_right')
    add('bshc-core-f64', BASE, mode='core', q=(2, 7, 4, 8), kvs=(2, 9, 2, 8), H=4, G=2, c=8, layout='bshc',
        dtype='f64', mask=True)
    add('bshc-big', STD, mode='core', q=(1, 257, 2, 32), kvs=(1, 257, 1, 32), H=2, G=1, c=32, layout='bshc',
        causal='top_left')
    # sharp softmaxes
    for ws in (4.0, 8.0):
        add('sharp-full-%g' % ws, STD + ('tcc:2:generic',), x=(2, 17, 32), H=2, G=1, c=16, wscale=ws,
            causal='top_left', mask=True)
        add('sharp-core-%g' % ws, STD, mode='core', q=(2, 2, 33, 16), kvs=(2, 2, 33, 16), H=2, c=16, xscale=ws / 2)
        add('sharp-big-%g' % ws, STD, mode='core', q=(1, 4, 257, 64), kvs=(1, 2, 257, 64), H=4, G=2, c=64,
            xscale=ws / 2, causal='top_left')
        add('sharp-gated-%g' % ws, BASE, x=(2, 4, 9, 16), H=2, c=8, gated=True, names='af', preset='alphafold',
            qkv_bias=False, wscale=ws, bias=(2, 1, 2, 9, 9), mask=True)
    add('sharp-rope-sinks', STD, x=(2, 33, 64), H=4, G=1, c=16, rope='neox', sinks=True, wscale=6.0,
        causal='top_left', preset='mqa')
    # combinations, scale, biases
    add('combo-core-f64', STD, mode='core', q=(2, 4, 6, 8), kvs=(2, 2, 9, 8), H=4, G=2, c=8, rope='gptj',
        alibi=8.0, softcap=5.0, sinks=True, lse=True, mask=True, bias=(2, 4, 6, 9), dtype='f64',
        causal='bottom_right')
    add('scale-custom', BASE, x=(2, 7, 16), H=2, c=8, scale=0.7)
    add('no-biases', BASE, x=(2, 7, 16), H=2, c=8, qkv_bias=False, out_bias=False)
    add('hdim-wide', BASE, x=(2, 7, 12), H=3, c=16)
    # names, prefixes, files, stored dtypes
    add('inproj-gqa', STD, x=(2, 6, 32), H=4, G=2, c=8, names='inproj', causal='top_left')
    add('inproj-mqa-nobias', BASE, x=(2, 6, 32), H=4, G=1, c=8, names='inproj', qkv_bias=False, preset='mqa')
    add('prefix-hf', STD, prefix='model.layers.3.self_attn.', x=(2, 7, 16), H=2, c=8, mask=True)
    add('prefix-decoys-2files', STD, prefix='model.layers.1.self_attn.', decoys=True, files=2, x=(2, 7, 16), H=2,
        c=8, mask=True, mask_dtype='BOOL')
    add('prefix-inputs-prefixed', BASE, prefix='blk.0.', prefix_inputs=True, decoys=True, x=(2, 7, 16), H=2, c=8,
        bias=(2, 7, 7), sinks=True)
    add('prefix-af-gated', BASE, prefix='evoformer.msa_att_row.mha.', decoys=True, files=2, x=(2, 3, 6, 16), H=2,
        c=8, gated=True, names='af', preset='alphafold', qkv_bias=False, bias=(2, 1, 2, 6, 6), mask=True)
    add('prefix-inproj', BASE, prefix='encoder.layers.0.self_attn.', decoys=True, x=(2, 6, 16), H=2, c=8,
        names='inproj')
    add('prefix-core', BASE, prefix='attn.', prefix_inputs=True, decoys=True, mode='core', q=(2, 2, 5, 8),
        kvs=(2, 1, 9, 8), H=2, G=1, c=8)
    for sd in ('F64', 'F16', 'BF16'):
        add('file-%s-into-f32' % sd, BASE, x=(2, 7, 16), H=2, c=8, store=sd, bias=(2, 7, 7), sinks=True,
            causal='top_left')
    add('file-F32-into-f64', BASE, x=(2, 7, 16), H=2, c=8, store='F32', dtype='f64', mask=True)
    # dropout gradients (several seeds)
    dseeds = (0, 1, 42, 2 ** 32 + 5, 2 ** 40 + 3, 2 ** 64 - 1)
    for i, s in enumerate(dseeds):
        add('drop-full-seed%d' % i, STD if i % 2 == 0 else BASE, x=(2, 9, 16), H=2, c=8, dropout=0.2, seed=s,
            causal='top_left')
    DR = STD + ('tcc:1:default:plain', 'tcc:2:generic', 'tcc:2:avx2')
    add('drop-full-f64-mask', DR, x=(2, 9, 16), H=2, c=8, dropout=0.3, seed=2 ** 40 + 3, dtype='f64', mask=True)
    add('drop-gqa-bias', DR, x=(2, 3, 9, 16), H=4, G=2, c=4, dropout=0.1, seed=7, bias=(2, 1, 4, 9, 9))
    add('drop-core-big', DR, mode='core', q=(1, 4, 257, 32), kvs=(1, 2, 257, 32), H=4, G=2, c=32, dropout=0.1,
        seed=99, causal='top_left')
    add('drop-core-sinks', DR, mode='core', q=(2, 2, 5, 8), kvs=(2, 2, 9, 8), H=2, c=8, dropout=0.5, seed=5,
        sinks=True, lse=True)
    add('drop-global', DR, x=(3, 7, 16), H=2, c=8, names='af', preset='alphafold', qkv_bias=False, glob=True,
        gated=True, mask=True, dropout=0.25, seed=11)
    add('drop-af-axis', DR, x=(5, 4, 16), attn_dim=-3, H=2, c=8, gated=True, names='af', preset='alphafold',
        qkv_bias=False, mask=True, bias=(2, 5, 5), dropout=0.2, seed=3)
    add('drop-bshc', DR, mode='core', q=(2, 7, 4, 8), kvs=(2, 9, 2, 8), H=4, G=2, c=8, layout='bshc', dropout=0.2,
        seed=8)
    add('drop-empty-rows', DR, x=(3, 6, 16), H=2, c=8, mask=True, empty_rows_ok=True, causal='top_left',
        dropout=0.4, seed=1)
    add('drop-weights-out', STD, x=(2, 7, 16), H=2, c=8, weights_out=True, dropout=0.3, seed=17)
    add('drop-p0.9', STD, mode='core', q=(2, 2, 9, 8), kvs=(2, 2, 9, 8), H=2, c=8, dropout=0.9, seed=2 ** 33)
    # dropout keep masks, bit for bit
    MC = ('tcc:1', 'tcc:2', 'cc:2', 'tcc:1:default:plain', 'tcc:4:generic', 'tcc:3:avx2', 'tcc:2:avx512',
          'cc:4:avx2', 'tcc:1:noprims')
    for shape in ((1, 1, 1, 4, 8), (3, 2, 1, 9, 13), (2, 4, 2, 5, 7)):
        B, H, G, Sq, Sk = shape
        for p in (0.1, 0.5, 0.9):
            for s in (0, 1, 2 ** 32 + 5, 2 ** 64 - 1, 123456789012345):
                addmask('mask-%s-p%g-s%d' % ('x'.join(map(str, shape)), p, s),
                        MC if (s in (0, 2 ** 64 - 1) and p == 0.5) else ('tcc:1', 'tcc:2', 'tcc:1:default:plain'),
                        batch=(B,), H=H, G=G, Sq=Sq, Sk=Sk, p=p, seed=s, dtype='f64', layout='bhsc')
    for p in (0.1, 0.5):
        for s in (0, 2 ** 64 - 1, 987654321):
            addmask('mask-f32-batch2x3-p%g-s%d' % (p, s), MC, batch=(2, 3), H=2, G=1, Sq=9, Sk=13, p=p, seed=s,
                    dtype='f32', layout='bhsc')
            addmask('mask-f32-bshc-p%g-s%d' % (p, s), MC, batch=(2,), H=4, G=2, Sq=6, Sk=11, p=p, seed=s,
                    dtype='f32', layout='bshc')
    addmask('mask-f32-long-p0.3', MC, batch=(1,), H=2, G=2, Sq=40, Sk=70, p=0.3, seed=31337, dtype='f32',
            layout='bhsc')
    L.append(Case('p0-equals-no-dropout', 'p0', D(x=(2, 9, 16), H=2, c=8, causal='top_left'),
                  cfgs('tcc:1', 'tcc:2', 'cc:2', 'tcc:1:default:plain')))
    L.append(Case('p0-equals-no-dropout-core-f64', 'p0', D(mode='core', q=(2, 2, 5, 8), kvs=(2, 1, 9, 8), H=2, G=1,
                                                             c=8, dtype='f64', sinks=True), cfgs('tcc:1', 'tcc:2')))
    # every backend x thread count 1-4 x ISA, plain forms and ATTNC_NO_PRIMS
    for tag, kw in (
            ('mx-full-gqa', dict(x=(2, 17, 32), H=4, G=2, c=8, causal='top_left', mask=True)),
            ('mx-full-f64', dict(x=(2, 9, 32), H=4, G=2, c=8, dtype='f64', causal='top_left', bias=(4, 9, 9))),
            ('mx-big-core-257', dict(mode='core', q=(1, 4, 257, 64), kvs=(1, 2, 257, 64), H=4, G=2, c=64,
                                     causal='top_left')),
            ('mx-big-full-257', dict(x=(1, 257, 64), H=4, G=2, c=16, causal='top_left', mask=True)),
            ('mx-combo-all', dict(x=(2, 11, 32), H=4, G=2, c=8, rope='neox', rope_dim=4, alibi=4.0, softcap=20.0,
                                  sinks=True, lse=True, mask=True, bias=(4, 11, 11), causal='top_left',
                                  window=(5, 0))),
            ('mx-af-col-gated', dict(x=(5, 4, 16), attn_dim=-3, H=2, c=8, gated=True, names='af', preset='alphafold',
                                     qkv_bias=False, mask=True, bias=(2, 5, 5))),
            ('mx-global-masked', dict(x=(3, 7, 16), H=4, c=8, names='af', preset='alphafold', qkv_bias=False,
                                      glob=True, global_mean='masked', gated=True, mask=True)),
            ('mx-rope-gptj-sinks', dict(x=(2, 33, 64), H=4, G=1, c=16, rope='gptj', sinks=True, wscale=6.0,
                                        causal='top_left', preset='mqa', lse=True)),
            ('mx-bshc-big', dict(mode='core', q=(1, 257, 2, 32), kvs=(1, 257, 1, 32), H=2, G=1, c=32,
                                 layout='bshc', causal='top_left')),
            ('mx-drop-core', dict(mode='core', q=(2, 4, 33, 16), kvs=(2, 2, 33, 16), H=4, G=2, c=16, dropout=0.2,
                                  seed=2 ** 64 - 1, causal='bottom_right', lse=True)),
            ('mx-drop-full-f64', dict(x=(2, 9, 16), H=2, c=8, dropout=0.3, seed=5, dtype='f64', mask=True)),
    ):
        add(tag, MATRIX, **kw)
    return L


# ---------------------------------------------------------------- running attnc
class Runner(object):
    def __init__(self, attnc, workdir, cc_cache):
        self.attnc, self.workdir = attnc, workdir
        self.env = dict(os.environ)
        self.env['ATTNC_CACHE_DIR'] = cc_cache
        self.runs = 0

    def grad(self, spec, files, dout, out, cfg, seed, prefix):
        cmd = [self.attnc, 'grad', spec]
        for f in files:
            cmd += ['--tensors', f]
        cmd += ['--dout', dout, '--out', out, '--seed', str(seed), '--quiet'] + cfg.args()
        if prefix:
            cmd += ['--prefix', prefix]
        if os.path.exists(out):
            os.unlink(out)
        self.runs += 1
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=cfg.env(self.env), timeout=900)
        except subprocess.TimeoutExpired:
            return None, None, 'timed out after 900 s'
        if p.returncode != 0:
            return None, None, 'exit %d: %s' % (p.returncode, p.stderr.strip()[-800:])
        arrays, dtypes = O.st_load(out)
        return arrays, dtypes, None

    def command(self, spec, files, dout, cfg, seed, prefix):
        rel = lambda f: os.path.relpath(f, REPO)  # noqa: E731
        cmd = [rel(self.attnc), 'grad', spec]
        for f in files:
            cmd += ['--tensors', rel(f)]
        cmd += ['--dout', rel(dout), '--out', '/tmp/attnc_grad_repro.st', '--seed', str(seed)] + cfg.args()
        if prefix:
            cmd += ['--prefix', prefix]
        return 'cd %s && %s%s' % (shlex.quote(REPO), cfg.env_prefix(), ' '.join(shlex.quote(a) for a in cmd))


def row_names(c):
    return ('f32', 'f32-grad') if c['dtype'] == 'f32' else ('f64', 'f64')


def kernel_st_dtype(c):
    return 'F32' if c['dtype'] == 'f32' else 'F64'


def decoy_tensors(T, rng, prefix, c):
    """Another layer's weights and unprefixed weights: attnc must skip them."""
    d = {}
    for name, a in T.items():
        if name in ('x', 'kv', 'q', 'k', 'v', 'bias', 'mask', 'sinks', 'q_pos', 'k_pos', 'rope_freqs'):
            if name in ('q', 'k', 'v'):  # core mode: another layer's inputs under another prefix
                d['decoy.layer.' + name] = (rng.standard_normal(a.shape) * 3).astype(a.dtype)
            continue
        bad = (rng.standard_normal(a.shape) * 3).astype(a.dtype)
        d['model.layers.0.other.' + name] = bad
        d[name] = bad  # without the prefix: another layer's, to skip
    return d


def case_inputs(case):
    """The case's config, spec, generator (after drawing), inputs and dout: the same for every run of it."""
    c = case.c
    rng = np.random.default_rng(case.rngseed)
    T = O.make_inputs(c, rng)
    dout = rng.standard_normal(O.out_shape(c)).astype(O.np_dtype(c))
    return c, O.spec_of(c), rng, T, dout


def run_grad_case(case, runner, override, opts):
    """Returns (records, failures): records are dicts, one per check."""
    c, spec, rng, T, dout = case_inputs(case)
    ref = O.reference(c, T, dout)
    orow, grow = row_names(c)
    wdir = os.path.join(runner.workdir, case.tag.replace('/', '_'))
    os.makedirs(wdir, exist_ok=True)
    P = case.prefix
    inputs = ('x', 'kv', 'q', 'k', 'v', 'bias', 'mask', 'sinks', 'q_pos', 'k_pos', 'rope_freqs')
    fname = {n: (P + n if (P and (n not in inputs or case.prefix_inputs)) else n) for n in T}
    weights = {fname[n]: O.to_file_dtype(c, n, a) for n, a in T.items() if n not in inputs}
    ins = {fname[n]: O.to_file_dtype(c, n, a) for n, a in T.items() if n in inputs}
    if case.decoys:
        weights.update(decoy_tensors(T, np.random.default_rng(case.rngseed + 1), P, c))
    if case.files == 2:
        files = [os.path.join(wdir, 'weights.st'), os.path.join(wdir, 'inputs.st')]
        O.st_save(files[0], weights)
        O.st_save(files[1], ins)
    else:
        files = [os.path.join(wdir, 'tensors.st')]
        O.st_save(files[0], dict(weights, **ins))
    dfile = os.path.join(wdir, 'dout.st')
    O.st_save(dfile, {'dout': dout})
    # expected names and references
    expect = {'out': (ref['out'], orow, kernel_st_dtype(c), None)}
    if c['lse']:
        expect['lse'] = (ref['lse'], 'f32', 'F32', None)
    if c['weights_out']:
        expect['attn'] = (ref['attn'], 'f32', 'F32', None)
    G = ref['grads']
    allrms = max(float(np.sqrt(np.mean(g ** 2))) for g in G.values()) if G else 0.0
    sib_order = ('q_proj.bias', 'linear_q.bias', 'q_proj.weight', 'linear_q.weight', 'in_proj_weight', 'q', 'k', 'v',
                 'k_proj.weight', 'linear_k.weight', 'v_proj.weight', 'linear_v.weight')

    def sibling_rms(name, g):
        """The scale to judge a gradient that is zero in exact arithmetic against."""
        if g.size == 0 or np.max(np.abs(g)) > 1e-10 * allrms:
            return None
        for sn in sib_order:
            if sn in G and sn != name and np.max(np.abs(G[sn])) > 0:
                return float(np.sqrt(np.mean(G[sn] ** 2)))
        return None
    for n, g in G.items():
        key = 'grad.' + fname[n]
        if n == 'in_proj_bias':
            H, ch = c['H'], c['c']
            kvh = 1 if c['glob'] else c['G']
            parts = [('[q]', slice(0, H * ch)), ('[k]', slice(H * ch, H * ch + kvh * ch)),
                     ('[v]', slice(H * ch + kvh * ch, None))]
            qrms = float(np.sqrt(np.mean(g[:H * ch] ** 2)))
            sub = []
            for tagp, sl in parts:
                gs = g[sl]
                srms = qrms if tagp == '[k]' and np.max(np.abs(gs)) <= 1e-10 * max(qrms, 1e-300) else None
                sub.append((tagp, sl, gs, srms))
            expect[key] = (sub, grow, kernel_st_dtype(c), 'split')
        else:
            expect[key] = (g, grow, kernel_st_dtype(c), sibling_rms(n, g))
    configs = override or case.configs
    records, failures, results = [], [], {}
    for cfg in configs:
        base = dict(tag=case.tag, spec=spec, config=str(cfg))
        repro = (audit_cmd(case.tag, cfg),
                 runner.command(spec, files, dfile, cfg, c['seed'], P))
        if not HAVE[cfg.isa]:
            records.append(dict(base, check='skip', ok=True, why='CPU lacks %s' % cfg.isa))
            continue
        out = os.path.join(wdir, 'out_%s.st' % str(cfg).replace(':', '_'))
        arrays, dtypes, err = runner.grad(spec, files, dfile, out, cfg, c['seed'], P)
        if err:
            r = dict(base, check='run', tensor='-', ok=False, why=err)
            records.append(r)
            failures.append((r, repro))
            continue
        results[cfg] = arrays
        missing = sorted(set(expect) - set(arrays))
        extra = sorted(set(arrays) - set(expect))
        if missing or extra:
            r = dict(base, check='names', tensor='-', ok=False,
                     why='missing %s; unexpected %s' % (missing or 'none', extra or 'none'))
            records.append(r)
            failures.append((r, repro))
        else:
            records.append(dict(base, check='names', tensor='-', ok=True))
        for name, (refv, row, want_dt, extra_info) in expect.items():
            if name not in arrays:
                continue
            if dtypes[name] != want_dt:
                r = dict(base, check='dtype', tensor=name, ok=False, why='%s, want %s' % (dtypes[name], want_dt))
                records.append(r)
                failures.append((r, repro))
            pieces = extra_info == 'split' and [(name + tp, arrays[name][sl], gs, srms) for tp, sl, gs, srms in refv] \
                or [(name, arrays[name], refv, extra_info)]
            for tname, a, rv, srms in pieces:
                j = O.judge(a, rv, row, srms)
                r = dict(base, check='value', tensor=tname, row=row, **{k: v for k, v in j.items()})
                if srms is not None:
                    r['sibling_scale'] = srms
                records.append(r)
                if not j['ok']:
                    failures.append((r, repro))
    # the same bits for every thread count of a backend, ISA and form
    fams = {}
    for cfg in results:
        fams.setdefault(cfg.family(), []).append(cfg)
    for fam, lst in fams.items():
        lst.sort(key=lambda k: k.threads)
        for other in lst[1:]:
            A, B = results[lst[0]], results[other]
            diff = sorted(n for n in A if n not in B or A[n].tobytes() != B[n].tobytes())
            r = dict(tag=case.tag, spec=spec, config='%s vs %s' % (lst[0], other), check='bits', tensor='-',
                     ok=not diff, why=('differ: ' + ', '.join(diff)) if diff else '')
            records.append(r)
            if diff:
                failures.append((r, (audit_cmd(case.tag, lst[0], other),
                                     runner.command(spec, files, dfile, other, c['seed'], P))))
    if not failures and not opts.keep:
        shutil.rmtree(wdir, ignore_errors=True)
    return records, failures


def run_mask_case(case, runner, override, opts):
    """Dropout keep mask, bit for bit: core mode with v = identity (c = Sk), so
    out[b, h, i, :] is row i of the dropped probabilities and attn (weights_out)
    the probabilities before dropout."""
    m = case.mask
    batch, H, G, Sq, Sk, p, seed = m['batch'], m['H'], m['G'], m['Sq'], m['Sk'], m['p'], m['seed']
    dt = np.float32 if m['dtype'] == 'f32' else np.float64
    rng = np.random.default_rng(case.rngseed)
    c = Sk
    q = (rng.standard_normal(batch + (H, Sq, c)) * 0.3).astype(dt)
    k = (rng.standard_normal(batch + (G, Sk, c)) * 0.3).astype(dt)
    v = np.broadcast_to(np.eye(Sk, dtype=dt), batch + (G, Sk, c)).copy()
    dout = np.ones(batch + (H, Sq, c), dtype=dt)
    if m['layout'] == 'bshc':
        q, k, v, dout = (np.ascontiguousarray(np.swapaxes(t, -2, -3)) for t in (q, k, v, dout))
    spec = 'mode=core q=%s kv=%s%s dtype=%s train dropout=%r weights_out' % (
        ','.join(map(str, q.shape)), ','.join(map(str, k.shape)),
        ' layout=bshc' if m['layout'] == 'bshc' else '', m['dtype'], p)
    wdir = os.path.join(runner.workdir, case.tag)
    os.makedirs(wdir, exist_ok=True)
    tf, df = os.path.join(wdir, 'tensors.st'), os.path.join(wdir, 'dout.st')
    O.st_save(tf, {'q': q, 'k': k, 'v': v})
    O.st_save(df, {'dout': dout})
    want = O.keep_mask(batch, H, Sq, Sk, p, seed)
    records, failures = [], []
    tol = 1e-5  # attn is F32 whatever the dtype: kept values are attn / (1 - p) to f32 rounding
    for cfg in (override or case.configs):
        base = dict(tag=case.tag, spec=spec, config=str(cfg), seed=seed)
        repro = (audit_cmd(case.tag, cfg),
                 runner.command(spec, [tf], df, cfg, seed, ''))
        if not HAVE[cfg.isa]:
            records.append(dict(base, check='skip', ok=True, why='CPU lacks %s' % cfg.isa))
            continue
        arrays, dtypes, err = runner.grad(spec, [tf], df, os.path.join(wdir, 'out.st'), cfg, seed, '')
        if err:
            r = dict(base, check='run', tensor='-', ok=False, why=err)
            records.append(r)
            failures.append((r, repro))
            continue
        out, attn = arrays['out'].astype(np.float64), arrays['attn'].astype(np.float64)
        if m['layout'] == 'bshc':
            out = np.swapaxes(out, -2, -3)
        kept = out != 0
        bad = np.argwhere(kept != want)
        scaled = attn[want] / (1 - p)
        rel = float(np.max(np.abs(out[want] - scaled) / np.abs(scaled))) if want.any() else 0.0
        ok = len(bad) == 0 and rel <= tol and bool(np.all(attn > 0))
        why = '' if ok else 'mask mismatches %d of %d (first b,h,i,j: %s); kept scale rel err %.3g; attn > 0: %s' % (
            len(bad), want.size, bad[:4].tolist(), rel, bool(np.all(attn > 0)))
        r = dict(base, check='mask', tensor='out', ok=ok, why=why, mismatches=int(len(bad)), kept=int(want.sum()),
                 total=int(want.size), scale_rel_err=rel)
        records.append(r)
        if not ok:
            failures.append((r, repro))
    if not failures and not opts.keep:
        shutil.rmtree(wdir, ignore_errors=True)
    return records, failures


def run_p0_case(case, runner, override, opts):
    """`dropout=0` (and `dropout=0.0`) gives the same bits as no dropout, for any seed."""
    c, spec, rng, T, dout = case_inputs(case)
    wdir = os.path.join(runner.workdir, case.tag)
    os.makedirs(wdir, exist_ok=True)
    tf, df = os.path.join(wdir, 'tensors.st'), os.path.join(wdir, 'dout.st')
    O.st_save(tf, T)
    O.st_save(df, {'dout': dout})
    records, failures = [], []
    for cfg in (override or case.configs):
        base = dict(tag=case.tag, spec=spec, config=str(cfg))
        if not HAVE[cfg.isa]:
            continue
        got = []
        for sp, seed in ((spec, 0), (spec + ' dropout=0', 77), (spec + ' dropout=0.0', 2 ** 64 - 1)):
            arrays, _, err = runner.grad(sp, [tf], df, os.path.join(wdir, 'out.st'), cfg, seed, '')
            got.append((sp, seed, arrays, err))
        errs = [(sp, e) for sp, _, _, e in got if e]
        ok = not errs and all(set(g[2]) == set(got[0][2]) and
                              all(g[2][n].tobytes() == got[0][2][n].tobytes() for n in got[0][2]) for g in got[1:])
        r = dict(base, check='p0', tensor='-', ok=ok, why='' if ok else (str(errs) if errs else 'bits differ'))
        records.append(r)
        if not ok:
            failures.append((r, (audit_cmd(case.tag, cfg),
                                 runner.command(spec + ' dropout=0', [tf], df, cfg, 77, ''))))
    if not failures and not opts.keep:
        shutil.rmtree(wdir, ignore_errors=True)
    return records, failures


RUNNERS = {'grad': run_grad_case, 'mask': run_mask_case, 'p0': run_p0_case}


# ---------------------------------------------------------------- summary
def fmt_failure(r, repro):
    lines = ['FAIL %s [%s] %s %s' % (r['tag'], r['config'], r['check'], r.get('tensor', '-')),
             '  spec:    %s' % r['spec']]
    if r['check'] == 'value':
        if 'why' in r:
            lines.append('  why:     %s' % r['why'])
        else:
            lines.append('  row %s: worst |a-r| = %.3g x bound at %s (a=%.10g r=%.10g bound=%.3g); NMSE %.3g '
                         '(%.3g x bound)%s' % (r['row'], r['ratio'], r['at'], r['a'], r['r'], r['bound'], r['nmse'],
                                               r['nmse_ratio'], ' [judged on a sibling\'s scale]'
                                               if 'sibling_scale' in r else ''))
    else:
        lines.append('  why:     %s' % r.get('why', ''))
    lines.append('  repro:   %s' % repro[0])
    lines.append('  attnc:   %s' % repro[1])
    return '\n'.join(lines)


def summarize(records, failures, runs, secs, mode, cases):
    values = [r for r in records if r['check'] == 'value' and 'ratio' in r]
    out = ['grad_audit (%s): %d cases, %d attnc runs, %d checks in %.0f s' % (
        mode, cases, runs, sum(1 for r in records if r['check'] != 'skip'), secs)]
    kinds = {}
    for r in records:
        kinds[r['check']] = kinds.get(r['check'], 0) + 1
    out.append('  checks by kind: ' + ', '.join('%s %d' % kv for kv in sorted(kinds.items())))
    out.append('  worst element ratio (|a-r| / bound; <= 1 passes) and worst NMSE / bound per DESIGN.md row:')
    groups = {}
    for r in values:
        t = r['tensor']
        what = 'out' if t == 'out' else ('lse' if t == 'lse' else ('attn' if t == 'attn' else 'gradients'))
        groups.setdefault((r['row'], what), []).append(r)
    for key in sorted(groups):
        lst = groups[key]
        w = max(lst, key=lambda r: r['ratio'])
        wn = max(lst, key=lambda r: r['nmse_ratio'])
        nm = ('%.3g (%s %s)' % (wn['nmse_ratio'], wn['tag'], wn['tensor'])) if wn['nmse_bound'] else 'n/a (no NMSE row)'
        out.append('    %-8s %-9s %6d checks  worst ratio %.3g (%s %s [%s])  worst NMSE/bound %s' % (
            key[0], key[1], len(lst), w['ratio'], w['tag'], w['tensor'], w['config'], nm))
    masks = [r for r in records if r['check'] == 'mask']
    if masks:
        out.append('  dropout keep masks: %d runs, %d keep bits compared, %d mismatched; worst kept-value scale '
                   'rel err %.3g' % (len(masks), sum(r['total'] for r in masks), sum(r['mismatches'] for r in masks),
                                     max(r['scale_rel_err'] for r in masks)))
    bits = [r for r in records if r['check'] == 'bits']
    out.append('  thread-count determinism: %d comparisons, %d identical' % (len(bits), sum(r['ok'] for r in bits)))
    skips = [r for r in records if r['check'] == 'skip']
    if skips:
        out.append('  skipped %d runs (CPU lacks the ISA)' % len(skips))
    out.append('  Philox4x32-10 known answers: %s' % ', '.join(
        'ok' if ok else 'WRONG got %s' % [hex(x) for x in got] for _, _, _, got, ok in O.philox_selftest()))
    out.append('  failures: %d' % len(failures))
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 usage='%(prog)s [--quick] [--out PATH] [--case GLOB]... [--config CFG]... ...')
    ap.add_argument('--quick', action='store_true', help='the short case list')
    ap.add_argument('--out', default=None, help='results file (default build/grad_audit/results.jsonl)')
    ap.add_argument('--case', action='append', default=[], metavar='GLOB', help='only cases whose tag matches')
    ap.add_argument('--config', action='append', default=[], metavar='CFG',
                    help='BACKEND:THREADS[:ISA[:plain]] instead of the cases\' own')
    ap.add_argument('--attnc', default=os.path.join(REPO, 'build', 'attnc'), help='the attnc binary')
    ap.add_argument('--cc-cache', default=None, metavar='DIR', help='ATTNC_CACHE_DIR (default: fresh, removed)')
    ap.add_argument('--keep', action='store_true', help='keep every case\'s input files')
    ap.add_argument('-j', type=int, default=1, help='cases at a time')
    ap.add_argument('--list', action='store_true', help='print the cases, run nothing')
    opts = ap.parse_args()
    mode = 'quick' if opts.quick else 'full'
    global REPRO_FLAGS
    REPRO_FLAGS = (' --quick' if opts.quick else '') + (
        ' --attnc ' + shlex.quote(opts.attnc) if opts.attnc != os.path.join(REPO, 'build', 'attnc') else '')
    cases = build_cases(opts.quick)
    tags = [c.tag for c in cases]
    assert len(tags) == len(set(tags)), 'duplicate case tags'
    if opts.case:
        sel = [c for c in cases if any(fnmatch.fnmatchcase(c.tag, g) for g in opts.case)]
        if not sel:  # a tag of the other list
            other = build_cases(not opts.quick)
            sel = [c for c in other if any(fnmatch.fnmatchcase(c.tag, g) for g in opts.case)]
        cases = sel
        if not cases:
            sys.exit('grad_audit: no case matches %s (--list shows them)' % opts.case)
    override = [Config(t) for t in opts.config] or None
    if opts.list:
        for c in cases:
            spec = O.spec_of(c.c) if c.c else '(dropout keep mask) %s' % c.mask
            print('%-34s %-5s %s\n    configs: %s' % (c.tag, c.kind, spec,
                                                     ' '.join(str(x) for x in (override or c.configs))))
        print('%d cases, %d runs' % (len(cases), sum(len(override or c.configs) for c in cases)))
        return 0
    bad = [t for t in O.philox_selftest() if not t[4]]
    if not os.access(opts.attnc, os.X_OK):
        sys.exit('grad_audit: no %s (run make first, or pass --attnc)' % opts.attnc)
    outpath = opts.out or os.path.join(REPO, 'build', 'grad_audit', 'results.jsonl')
    outdir = os.path.dirname(os.path.abspath(outpath))
    os.makedirs(outdir, exist_ok=True)
    workdir = os.path.join(outdir, 'work')
    os.makedirs(workdir, exist_ok=True)
    tmp_cache = None
    if opts.cc_cache:
        cc_cache = opts.cc_cache
    else:
        cc_cache = tmp_cache = tempfile.mkdtemp(prefix='cc-cache-', dir=workdir)
    runner = Runner(os.path.abspath(opts.attnc), workdir, cc_cache)
    print('grad_audit %s: %d cases, attnc %s, CPU: %s' % (
        mode, len(cases), os.path.relpath(runner.attnc, os.getcwd()),
        ', '.join(i for i in ('avx2', 'avx512') if HAVE[i]) or 'no AVX2'), flush=True)
    t0 = time.time()
    records, failures = [], []
    if bad:
        failures.append((dict(tag='philox', spec='-', config='-', check='philox', tensor='-',
                              why='the oracle\'s Philox4x32-10 misses DESIGN.md\'s known answers'), ('-', '-')))

    def one(case):
        t = time.time()
        try:
            recs, fails = RUNNERS[case.kind](case, runner, override, opts)
        except Exception as e:  # a harness error is a failure to look at, not a crash
            import traceback
            r = dict(tag=case.tag, spec=O.spec_of(case.c) if case.c else str(case.mask), config='-',
                     check='harness', tensor='-', ok=False, why='%r\n%s' % (e, traceback.format_exc()))
            recs, fails = [r], [(r, (audit_cmd(case.tag), '-'))]
        return case, recs, fails, time.time() - t

    with open(outpath, 'w') as log:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.j)) as ex:
            for case, recs, fails, dt in ex.map(one, cases):
                for r in recs:
                    log.write(json.dumps(r, default=str) + '\n')
                records += recs
                failures += fails
                nv = sum(1 for r in recs if r['check'] != 'skip')
                print('%-36s %4d checks %s %6.1fs  (%.0fs)' % (case.tag, nv, 'ok  ' if not fails else
                                                                'FAIL %d' % len(fails), dt, time.time() - t0),
                      flush=True)
                for f in fails:
                    print(fmt_failure(*f), flush=True)
    secs = time.time() - t0
    if tmp_cache:
        shutil.rmtree(tmp_cache, ignore_errors=True)
    text = summarize(records, failures, runner.runs, secs, mode, len(cases))
    if failures:
        text += '\n\n' + '\n\n'.join(fmt_failure(*f) for f in failures)
    print('\n' + text)
    with open(outpath + '.summary.txt', 'w') as f:
        f.write(text + '\n')
    print('\nresults: %s (+ .summary.txt); inputs of failures kept under %s' % (
        os.path.relpath(outpath, os.getcwd()), os.path.relpath(workdir, os.getcwd())))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
