"""Color arithmetic in plain Python: WCAG contrast, CIELAB, CIEDE2000 and color-vision-deficiency
simulation.

Why here and not eyeballed: "readable" and "distinguishable" are numbers.  The themes' text
colors are checked against WCAG's 4.5:1, and the run palette's pairwise CIEDE2000 distance is
checked as people with normal vision, deuteranopia and protanopia see it (Machado et al. 2009).
Test support, not shipped: the palette and themes are fixed values, so only test_palette.py measures them.
"""

from __future__ import annotations

import math

Rgb = tuple[float, float, float]  # sRGB components in [0, 1]

# Machado, Oliveira & Fernandes (2009), severity 1.0; they act on linear RGB.
CVD_MATRICES: dict[str, tuple[Rgb, Rgb, Rgb]] = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
}
_XYZ = ((0.4124564, 0.3575761, 0.1804375), (0.2126729, 0.7151522, 0.0721750), (0.0193339, 0.1191920, 0.9503041))
_WHITE = (0.95047, 1.0, 1.08883)  # D65


def rgb(color: str) -> Rgb:
    """``"#rrggbb"`` as three floats in [0, 1]."""
    text = color.lstrip("#")
    if len(text) != 6:
        raise ValueError(f"expected #rrggbb, got {color!r}")
    return (int(text[0:2], 16) / 255, int(text[2:4], 16) / 255, int(text[4:6], 16) / 255)


def hex_color(value: Rgb) -> str:
    return "#" + "".join(f"{round(min(max(c, 0.0), 1.0) * 255):02x}" for c in value)


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def _gamma(c: float) -> float:
    c = min(max(c, 0.0), 1.0)
    return 12.92 * c if c <= 0.0031308 else 1.055 * c ** (1 / 2.4) - 0.055


def _apply(m: tuple[Rgb, Rgb, Rgb], v: Rgb) -> Rgb:
    return (m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
            m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
            m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2])


def luminance(color: str) -> float:
    """WCAG 2 relative luminance."""
    r, g, b = (_linear(c) for c in rgb(color))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio, 1 to 21; body text needs 4.5."""
    hi, lo = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def simulate(color: str, deficiency: str) -> str:
    """How ``color`` looks with a full protanopia, deuteranopia or tritanopia."""
    linear = tuple(_linear(c) for c in rgb(color))
    return hex_color(tuple(_gamma(c) for c in _apply(CVD_MATRICES[deficiency], linear)))  # type: ignore[arg-type]


def lab(color: str) -> Rgb:
    """CIE L*a*b* (D65)."""
    xyz = _apply(_XYZ, tuple(_linear(c) for c in rgb(color)))  # type: ignore[arg-type]

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    fx, fy, fz = (f(v / w) for v, w in zip(xyz, _WHITE))
    return (116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz))


def ciede2000(lab1: Rgb, lab2: Rgb) -> float:
    """CIEDE2000 color difference (Sharma, Wu & Dalal 2005); about 2 is just noticeable."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar ** 7 / (c_bar ** 7 + 25 ** 7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dh = 0.0
    elif abs(h2p - h1p) <= 180:
        dh = h2p - h1p
    else:
        dh = h2p - h1p - 360 if h2p > h1p else h2p - h1p + 360
    big_dh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        h_bar = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_bar = (h1p + h2p) / 2
    else:
        h_bar = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_bar - 30)) + 0.24 * math.cos(math.radians(2 * h_bar))
         + 0.32 * math.cos(math.radians(3 * h_bar + 6)) - 0.20 * math.cos(math.radians(4 * h_bar - 63)))
    sl = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    sc = 1 + 0.045 * cp_bar
    sh = 1 + 0.015 * cp_bar * t
    rt = (-2 * math.sqrt(cp_bar ** 7 / (cp_bar ** 7 + 25 ** 7))
          * math.sin(math.radians(60 * math.exp(-(((h_bar - 275) / 25) ** 2)))))
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (big_dh / sh) ** 2 + rt * (dc / sc) * (big_dh / sh))


def distance(a: str, b: str, deficiency: str | None = None) -> float:
    """CIEDE2000 between two colors as seen with normal vision (None) or a deficiency."""
    if deficiency is not None:
        a, b = simulate(a, deficiency), simulate(b, deficiency)
    return ciede2000(lab(a), lab(b))
