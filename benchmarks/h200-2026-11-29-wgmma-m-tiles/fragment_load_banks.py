"""Shared-memory wavefronts per fragment load of the one-pass tensor-core kernel's k loop, by
simulation: each of a warp's loads reads, for lane (group g, quad q), the footprint at row
(g or g + 8)'s position plus the tap offset of column q (or q + 4) of the k step; a load takes
as many wavefronts as the most distinct words any of the 32 banks serves. Layout: the
tensor-map copy's box (row pitch R, plane FH * R, channel FD * FH * R). Prints, per problem,
the mean over the kernel's loads for each candidate row pitch.
    python3 fragment_load_banks.py
"""


def wavefronts_per_load(td, th, tw, c_in, k, m_tiles, row):
    fh, fd = th + k - 1, td + k - 1
    plane, channel = fh * row, fd * fh * row
    taps = [
        ci * channel + kd * plane + kh * row + kw
        for ci in range(c_in)
        for kd in range(k)
        for kh in range(k)
        for kw in range(k)
    ]
    k_pad = (len(taps) + 7) // 8 * 8
    taps += [0] * (k_pad - len(taps))  # (padded taps read the first tap again)

    def position(slot):
        if slot >= td * th * tw:
            return None
        d, h, w = slot // (th * tw), (slot // tw) % th, slot % tw
        return d * plane + h * row + w

    total = loads = 0
    for warp in range(8):
        for ks in range(k_pad // 8):
            for mt in range(m_tiles):
                for half in range(2):
                    for column in range(2):
                        banks = {}
                        for lane in range(32):
                            g, q = lane >> 2, lane & 3
                            p = position((warp * m_tiles + mt) * 16 + g + 8 * half)
                            if p is not None:
                                word = p + taps[8 * ks + q + 4 * column]
                                banks.setdefault(word % 32, set()).add(word)
                        total += max((len(v) for v in banks.values()), default=0)
                        loads += 1
    return total / loads


PROBLEMS = [  # name, box (TD, TH, TW), C_in, k, m16 tiles a warp
    ("Conv3d headline, 3 tiles (2 x 6 x 30)", 2, 6, 30, 3, 3, 3),
    ("Conv3d headline, 4 tiles (2 x 8 x 30)", 2, 8, 30, 3, 3, 4),
    ("W 24", 2, 6, 24, 3, 3, 3),
    ("W 64, 1 channel", 1, 6, 64, 1, 3, 3),
    ("k 2, 4 channels", 2, 6, 32, 4, 2, 3),
]

if __name__ == "__main__":
    for name, td, th, tw, c_in, k, m_tiles in PROBLEMS:
        fw = tw + k - 1
        first = (fw + 3) // 4 * 4
        row = {
            r: wavefronts_per_load(td, th, tw, c_in, k, m_tiles, r)
            for r in range(first, fw + 33, 4)
        }
        print(f"{name}: FW {fw}; " + ", ".join(f"{r} ({r % 32}): {v:.2f}" for r, v in row.items()))
