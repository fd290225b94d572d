"""Draw a kernel's attention weights as a heatmap, in text and as an SVG.

    make
    PYTHONPATH=python /usr/bin/python3 examples/python/attn_heatmap.py [heatmap.svg]

The spec is a causal self-attention over 12 positions whose last 3 keys are
padding (mask=key).  `weights_out` makes the kernel also write its own
attention weights, which run() returns as "attn" (B, H, Sq, Sk) beside
"out".  Cells the masks hide are drawn apart from small weights: blank in
text, grey in the SVG.  No matplotlib: numpy and the attnc module only.
"""
import sys

import numpy as np

import attnc

S, C, H = 12, 32, 2
SPEC = "mha x=1,%d,%d heads=%d causal mask=key weights_out" % (S, C, H)
SHADES = ".:-=+*#%@"  # weight 0 .. 1, in nine steps


def tensors():
    """Smooth, deterministic inputs and weights (no random generator)."""
    i = np.arange(S)[:, None]
    c = np.arange(C)[None, :]
    t = {"x": (np.sin(0.9 * i + 0.4 * c) + np.cos(0.25 * i * c / 3.0)).astype(np.float32)[None]}
    for n, (name, f) in enumerate([("q_proj", 0.31), ("k_proj", 0.47), ("v_proj", 0.23), ("o_proj", 0.11)]):
        r = np.arange(C)[:, None]
        t[name + ".weight"] = (0.35 * np.cos(f * (r + 1) * (c + 2) + n)).astype(np.float32)
        t[name + ".bias"] = (0.1 * np.sin(np.arange(C) * f)).astype(np.float32)
    t["mask"] = np.array([[1] * (S - 3) + [0] * 3], dtype=np.uint8)
    return t


def visible(mask):
    """(Sq, Sk) booleans: query i sees key j (causal, and the key mask)."""
    i = np.arange(S)[:, None]
    j = np.arange(S)[None, :]
    return (j <= i) & (mask[0][None, :] != 0)


def text_heatmap(attn, seen):
    lines = [("     " + "".join("head %-*d" % (2 * S - 3, h) for h in range(H))).rstrip()]
    for i in range(S):
        row = "q%-3d " % i
        for h in range(H):
            for j in range(S):
                w = attn[0, h, i, j]
                row += (SHADES[min(len(SHADES) - 1, int(w * len(SHADES)))] if seen[i, j] else " ") * 2
            row += "  "
        lines.append(row.rstrip())
    lines.append("     keys 0..%d left to right; blank: hidden by causal or the mask; %s: weight 0 .. 1"
                 % (S - 1, SHADES))
    return "\n".join(lines)


def svg_heatmap(attn, seen, title):
    cell, gap, top = 18, 24, 40
    width = H * S * cell + (H - 1) * gap + 20
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">'
           % (width, top + S * cell + 30),
           '<text x="10" y="16">%s</text>' % title]
    for h in range(H):
        x0 = 10 + h * (S * cell + gap)
        out.append('<text x="%d" y="34">head %d</text>' % (x0, h))
        for i in range(S):
            for j in range(S):
                if seen[i, j]:
                    v = int(255 * (1 - attn[0, h, i, j]))
                    fill = "rgb(%d,%d,255)" % (v, v)
                else:
                    fill = "#d0d0d0"
                out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="white"/>'
                           % (x0 + j * cell, top + i * cell, cell, cell, fill))
    out.append('<text x="10" y="%d">rows: queries; columns: keys; grey: hidden (causal, padding)</text>'
               % (top + S * cell + 20))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    k = attnc.compile(SPEC)
    t = tensors()
    outs = k.run(t)
    attn = outs["attn"]
    seen = visible(t["mask"])
    print("spec: %s" % SPEC)
    print("outputs: " + ", ".join("%s %s" % (n, a.shape) for n, a in outs.items()))
    print(text_heatmap(attn, seen))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(svg_heatmap(attn, seen, SPEC))
        print("wrote %s" % sys.argv[1])


if __name__ == "__main__":
    main()
