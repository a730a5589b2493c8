#!/usr/bin/env python3
"""Where a profile's time goes, by category: `perf_categories.py PERF_DATA BINARY`.

perf's self-time report names the symbol a sample landed in, and in a release build most of our
kernels' code is inlined into closures that carry another crate's name (`pulp`'s `vectorize`,
`core`'s `FnMut::call_mut`). So each sample's address in BINARY is expanded into its inline
chain (`llvm-addr2line -i`, which needs line tables: build with
`CARGO_PROFILE_RELEASE_DEBUG=line-tables-only`), and the sample goes to the first frame,
innermost outwards, whose function or source file names a category below. Used by
`benches/profile_rows.sh`; the categories are those of benches/README.md."""
import re, subprocess, sys, collections
data, binary = sys.argv[1], sys.argv[2]
script = subprocess.run(["perf", "script", "-i", data, "--no-demangle", "-F", "ip,sym,symoff,dso"],
                        capture_output=True, text=True).stdout
nm = {}
for line in subprocess.run(["nm", binary], capture_output=True, text=True).stdout.splitlines():
    parts = line.split()
    if len(parts) == 3:
        nm[parts[2]] = int(parts[0], 16)
samples = collections.Counter()
for line in script.splitlines():
    m = re.match(r"\s*([0-9a-f]+)\s+(\S+)\+0x([0-9a-f]+)\s+\((.*)\)", line)
    if m:
        samples[(m.group(2), int(m.group(3), 16), m.group(4))] += 1
        continue
    m = re.match(r"\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)", line)
    if m:
        samples[(m.group(2), None, m.group(3))] += 1
total = sum(samples.values())
addrs = {}
for (sym, off, dso), n in samples.items():
    if off is not None and dso.endswith(binary.split("/")[-1]) and sym in nm:
        addrs[(sym, off)] = nm[sym] + off
uniq = sorted(set(addrs.values()))
chains = {}
if uniq:
    out = subprocess.run(["llvm-addr2line", "-a", "-i", "-f", "-C", "-e", binary],
                         input="\n".join(hex(a) for a in uniq), capture_output=True, text=True).stdout
    cur = None
    lines = out.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("0x"):
            cur = int(lines[i], 16)
            chains[cur] = []
            i += 1
            continue
        chains[cur].append((lines[i], lines[i + 1] if i + 1 < len(lines) else ""))
        i += 2
cats = [
    ("GEMM micro-kernels", r"microkernel"),
    ("GEMM packing", r"pack_operands|pack_lhs|pack_rhs|gemm_common::pack"),
    ("Winograd transforms", r"kernels::winograd|kernels/winograd"),
    ("im2col / col2im", r"kernels/conv\.rs|kernels::conv::"),
    ("batch norm (ours)", r"kernels::batch_norm|kernels/batch_norm|models/src/head\.rs"),
    ("GELU (ours)", r"kernels::gelu|kernels/gelu"),
    ("depthwise / grouped conv (burn-flex)", r"conv3d|conv_transpose|burn-flex[^ ]*/ops/conv|burn_flex::ops::conv"),
    ("allocator", r"mimalloc|\bmi_"),
    ("exp (libm)", r"\bexpf?\b|libm\.so"),
    ("conv glue (ours)", r"kernels::flex|kernels/flex"),
    ("burn-flex element-wise / reductions", r"burn_flex|burn_backend|burn_tensor|burn_autodiff|macerator|burn-flex|burn-backend|burn-tensor|burn-autodiff"),
    ("GEMM (other)", r"gemm"),
    ("memset / memmove / memcpy", r"memset|memmove|memcpy"),
    ("page clearing (kernel)", r"clear_page|folio_zero|huge_pmd|page_fault|handle_mm_fault"),
    ("rayon / scheduling", r"rayon|crossbeam|sched|futex|switch"),
    ("allocator (libc)", r"malloc|\bfree\b"),
    ("random init", r"rand|chacha"),
]
def categorize(names):
    for name in names:
        for cat, rx in cats:
            if re.search(rx, name):
                return cat
    return None
tot = collections.Counter()
other = collections.Counter()
for (sym, off, dso), n in samples.items():
    names = []
    if (sym, off) in addrs:
        names = [f + " " + loc for f, loc in chains.get(addrs[(sym, off)], [])]
    names.append(sym + " " + dso)
    c = categorize(names)
    if c is None:
        tot["other"] += n
        other[(names[-1])[:100]] += n
    else:
        tot[c] += n
for cat, n in tot.most_common():
    print(f"{100*n/total:6.1f} %  {cat}")
print(f"  ({total} samples); top of 'other':")
for s, n in other.most_common(6):
    print(f"      {100*n/total:5.1f} %  {s}")
