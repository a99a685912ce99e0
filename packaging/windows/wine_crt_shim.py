"""A copy of Wine 8.0's ucrtbase.dll with its missing complex-number accessors, for the smoke test.

Wine 8.0 (Debian 12) leaves crealf, cimagf, cimag, creall and cimagl of ucrtbase.dll
unimplemented (creal is there): calling one aborts the program ("Unimplemented function
ucrtbase.dll.crealf").
numpy 2's win_amd64 build calls crealf while it is imported, so no numpy program starts under
that Wine. Windows itself has them (they are part of the Universal CRT since Windows 10). This
writes Wine's ucrtbase.dll with those five exports replaced by their few instructions (MSVC x64
ABI: a _Fcomplex arrives in RCX, a _Dcomplex/_Lcomplex by reference in RCX; the result goes in
XMM0) and without Wine's "builtin" mark; the smoke test puts it in its scratch prefix's system32
and loads it with WINEDLLOVERRIDES=ucrtbase=n. Only the test's Wine uses it; nothing of it is
installed or shipped.

    python3 wine_crt_shim.py WINE_UCRTBASE OUT_DIR     ->  OUT_DIR/ucrtbase.dll
"""

import struct
import sys
from pathlib import Path

CODE = {
    "crealf": bytes.fromhex("660f6ec1c3"),  # movd xmm0, ecx; ret
    # mov rax, rcx; shr rax, 32; movd xmm0, eax; ret
    "cimagf": bytes.fromhex("4889c848c1e820660f6ec0c3"),
    "cimag": bytes.fromhex("f20f104108c3"),  # movsd xmm0, [rcx+8]; ret
    "creall": bytes.fromhex("f20f1001c3"),  # movsd xmm0, [rcx]; ret (long double is double)
    "cimagl": bytes.fromhex("f20f104108c3"),
}


def exports(pe: bytes) -> tuple[dict[str, int], list[tuple[int, int, int]]]:
    """{name: RVA} of the export table, and the sections as (RVA, size, file offset)."""
    pe_at = struct.unpack_from("<I", pe, 0x3C)[0]
    if pe[pe_at:pe_at + 4] != b"PE\0\0":
        raise SystemExit("not a PE file")
    sections_count, optional_size = struct.unpack_from("<H12xH", pe, pe_at + 6)
    optional = pe_at + 24
    if struct.unpack_from("<H", pe, optional)[0] != 0x20B:
        raise SystemExit("not a PE32+ (x64) file")
    export_rva = struct.unpack_from("<I", pe, optional + 112)[0]
    sections = []
    for i in range(sections_count):
        at = optional + optional_size + 40 * i
        size, rva, _raw_size, raw = struct.unpack_from("<IIII", pe, at + 8)
        sections.append((rva, size, raw))

    def offset(rva: int) -> int:
        for start, size, raw in sections:
            if start <= rva < start + size:
                return raw + rva - start
        raise SystemExit(f"RVA {rva:#x} is in no section")

    d = offset(export_rva)
    n_names, functions, names, ordinals = struct.unpack_from("<IIII", pe, d + 24)
    table = {}
    for i in range(n_names):
        name_at = offset(struct.unpack_from("<I", pe, offset(names) + 4 * i)[0])
        name = pe[name_at:pe.index(b"\0", name_at)].decode()
        ordinal = struct.unpack_from("<H", pe, offset(ordinals) + 2 * i)[0]
        table[name] = offset(struct.unpack_from("<I", pe, offset(functions) + 4 * ordinal)[0])
    return table, sections


def main(source: str, out_dir: str) -> int:
    pe = bytearray(Path(source).read_bytes())
    table, _ = exports(bytes(pe))
    for name, code in CODE.items():
        if name not in table:
            raise SystemExit(f"{source} exports no {name}")
        pe[table[name]:table[name] + len(code)] = code
    # without Wine's builtin mark, Wine loads this file (WINEDLLOVERRIDES=ucrtbase=n), not its own
    mark = pe.find(b"Wine builtin DLL")
    if mark != -1:
        pe[mark:mark + 16] = bytes(16)
    out = Path(out_dir) / "ucrtbase.dll"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(pe)
    print(f"{out}: {', '.join(CODE)} filled in")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
