"""The target's layers on remote llama.cpp `rpc-server`s (llama.cpp's --rpc HOST:PORT,...).

llama-cpp-python no longer passes `rpc_servers` to llama.cpp, so the RPC devices are made
here as llama.cpp's own --rpc makes them (common/arg.cpp, add_rpc_devices): through ggml's
backend registry, `ggml_backend_rpc_add_server` for each server. They are not registered
globally, so only the model given them (the target) uses them; the draft stays local.

ggml aborts the whole process when a server cannot be reached or speaks another protocol
version (ggml-rpc.cpp, rpc_dispatcher::start), where no Python except reaches. So each server
is first greeted from Python with the protocol's own HELLO, and refused with a message.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.base import BackendError

# ggml-rpc.h and ggml-rpc.cpp of the llama.cpp vendored in llama-cpp-python 0.3.36
RPC_PROTO_MAJOR_VERSION = 7
RPC_PROTO_MINOR_VERSION = 0
RPC_CMD_HELLO = 14
RPC_CONN_CAPS_SIZE = 24
HELLO_REPLY_SIZE = 4 + RPC_CONN_CAPS_SIZE  # major, minor, patch, padding, conn_caps
GGML_BACKEND_DEVICE_TYPE_GPU = 1
GGML_BACKEND_DEVICE_TYPE_IGPU = 2
DEFAULT_TIMEOUT_S = 5.0

START_HINT = ("start rpc-server on that machine: rpc-server -H 0.0.0.0 -p {port} (build it "
              "with: bash packaging/build_llama_tools.sh rpc-server)")


@dataclass(frozen=True)
class RpcServer:
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


def parse_rpc_servers(text: str) -> list[RpcServer]:
    """`HOST:PORT[,HOST:PORT...]` as llama.cpp's --rpc takes it (no IPv6: llama.cpp splits
    at the first colon)."""
    servers: list[RpcServer] = []
    for item in (part.strip() for part in text.split(",")):
        host, sep, port = item.partition(":")
        if not item or not sep or not host or any(c.isspace() for c in host) or ":" in port:
            raise BackendError(
                f"--rpc: '{item}' is not HOST:PORT — give the rpc-servers as "
                "HOST:PORT[,HOST:PORT...], e.g. 192.168.1.20:50052"
            )
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BackendError(f"--rpc: '{item}' has no valid port (1-65535) — e.g. {host}:50052")
        server = RpcServer(host, int(port))
        if server not in servers:
            servers.append(server)
    return servers


def greet(server: RpcServer, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Check that an rpc-server of this protocol version answers at `server`."""
    where = server.endpoint
    try:
        sock = socket.create_connection((server.host, server.port), timeout=timeout)
    except socket.gaierror as exc:
        raise BackendError(f"--rpc: cannot resolve the host '{server.host}' ({exc.strerror}) "
                           "— check the name or use its IP address") from exc
    except ConnectionRefusedError as exc:
        raise BackendError(f"--rpc: nothing listens on {where} — "
                           + START_HINT.format(port=server.port)) from exc
    except OSError as exc:  # timeout, no route to host, network unreachable
        why = exc.strerror or f"no answer within {timeout:g} s"
        raise BackendError(f"--rpc: cannot reach {where} ({why}) — check the address, that the "
                           "machine is up and that its firewall lets the port through") from exc
    with sock:
        try:
            sock.sendall(bytes([RPC_CMD_HELLO]) + struct.pack("<Q", RPC_CONN_CAPS_SIZE)
                         + bytes(RPC_CONN_CAPS_SIZE))
            size = struct.unpack("<Q", _receive(sock, 8))[0]
            reply = _receive(sock, HELLO_REPLY_SIZE) if size == HELLO_REPLY_SIZE else b""
        except TimeoutError as exc:
            raise BackendError(
                f"--rpc: {where} accepted the connection but did not answer within "
                f"{timeout:g} s — an rpc-server serves one client at a time: is another "
                "program using it? Otherwise restart rpc-server there"
            ) from exc
        except OSError as exc:  # reset, closed
            raise BackendError(f"--rpc: {where} closed the connection at the greeting — is it "
                               "an rpc-server? " + START_HINT.format(port=server.port)) from exc
    if not reply:
        raise BackendError(f"--rpc: {where} does not answer as an rpc-server does — check the "
                           "port; " + START_HINT.format(port=server.port))
    major, minor, patch = reply[0], reply[1], reply[2]
    if major != RPC_PROTO_MAJOR_VERSION or minor > RPC_PROTO_MINOR_VERSION:
        raise BackendError(
            f"--rpc: the rpc-server at {where} speaks RPC protocol {major}.{minor}.{patch}, this "
            f"llama.cpp {RPC_PROTO_MAJOR_VERSION}.{RPC_PROTO_MINOR_VERSION}.x — build rpc-server "
            "from the same llama.cpp: bash packaging/build_llama_tools.sh rpc-server"
        )


def _receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


class _Exports:
    """Functions looked up in each library in turn. dlsym finds ggml-base's functions (most of
    the registry calls) through libggml, which links to it; a Windows DLL exports only its own."""

    def __init__(self, *libraries: ctypes.CDLL) -> None:
        self._libraries = libraries

    def __getattr__(self, name: str) -> Any:
        for library in self._libraries:
            try:
                return getattr(library, name)
            except AttributeError:
                continue
        raise AttributeError(f"no {name} in {', '.join(lib._name for lib in self._libraries)}")


def _loaded_ggml() -> Any:
    """The libggml that libllama itself is linked against.

    ggml keeps one backend registry per copy of libggml loaded. A wheel cannot hold symlinks,
    so llama_cpp/lib has libggml.so and libggml.so.0 as two files; llama_cpp._ggml opens the
    first, libllama the second, and with dynamically loaded backends (the bundle's CPU variants,
    the RPC plugin) only libllama's copy has them. The bundle keeps only the name the loader
    wants, so there llama_cpp._ggml cannot load at all. Ask the loader for the copy it already
    has instead (RTLD_NOLOAD: never a second one)."""
    import llama_cpp.llama_cpp

    lib_dir = Path(llama_cpp.llama_cpp.__file__).parent / "lib"
    if sys.platform == "win32":  # one copy per path; the DLLs libllama loaded are in lib_dir
        return _Exports(ctypes.CDLL(str(lib_dir / "ggml.dll")),
                        ctypes.CDLL(str(lib_dir / "ggml-base.dll")))
    if sys.platform == "darwin":
        candidates = [str(lib_dir / name) for name in ("libggml.0.dylib", "libggml.dylib")]
    else:  # glibc matches a bare name against the names the loaded libraries were needed by
        candidates = ["libggml.so.0", "libggml.so"]
    no_load = getattr(os, "RTLD_NOLOAD", 0)
    for name in candidates:
        try:
            return ctypes.CDLL(name, mode=ctypes.DEFAULT_MODE | no_load)
        except OSError:
            continue
    try:
        from llama_cpp import _ggml
    except OSError as exc:
        raise BackendError(f"cannot find llama.cpp's libggml next to libllama in {lib_dir} "
                           f"({exc}) — reinstall llama-cpp-python (bash packaging/setup.sh) "
                           "or the DraftLens package") from exc
    return _ggml.libggml


def _ggml() -> Any:
    """libllama's libggml, with the registry calls typed."""
    lib = _loaded_ggml()
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args, result in (
        ("ggml_backend_reg_by_name", [ctypes.c_char_p], vp),
        ("ggml_backend_reg_get_proc_address", [vp, ctypes.c_char_p], vp),
        ("ggml_backend_reg_dev_count", [vp], sz),
        ("ggml_backend_reg_dev_get", [vp, sz], vp),
        ("ggml_backend_reg_name", [vp], ctypes.c_char_p),
        ("ggml_backend_dev_count", [], sz),
        ("ggml_backend_dev_get", [sz], vp),
        ("ggml_backend_dev_type", [vp], ctypes.c_int),
        ("ggml_backend_dev_backend_reg", [vp], vp),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def rpc_supported() -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_supports_rpc())


def checked_servers(text: str) -> list[RpcServer]:
    """The servers of an --rpc list, once this build is known to have RPC and each server has
    answered the greeting."""
    servers = parse_rpc_servers(text)
    if not rpc_supported():
        raise BackendError(
            "--rpc: this llama-cpp-python was built without llama.cpp's RPC backend — rebuild it "
            "with: bash packaging/setup.sh (it builds with -DGGML_RPC=ON)"
        )
    for server in servers:
        greet(server)
    return servers


def offload_devices(text: str) -> list[int]:
    """The devices a model offloads its layers to: each server's (in the order given), then
    this machine's own GPUs, as llama.cpp orders them. The CPU holds the rest, as always."""
    servers = checked_servers(text)
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    address = reg and lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
    if not address:
        raise BackendError("--rpc: this llama.cpp's RPC backend has no add_server entry — "
                           "rebuild llama-cpp-python with: bash packaging/setup.sh")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    devices: list[int] = []
    for server in servers:
        server_reg = add_server(server.endpoint.encode())
        count = lib.ggml_backend_reg_dev_count(server_reg) if server_reg else 0
        if not count:
            raise BackendError(f"--rpc: the rpc-server at {server.endpoint} offers no device — "
                               "check its --device option")
        devices.extend(lib.ggml_backend_reg_dev_get(server_reg, i) for i in range(count))
    devices.extend(local_gpus(lib))
    return devices


def local_gpus(lib: Any | None = None) -> list[int]:
    """This machine's GPU devices (discrete first, else integrated), RPC servers left out."""
    lib = lib or _ggml()
    gpus: list[int] = []
    igpus: list[int] = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        kind = lib.ggml_backend_dev_type(dev)
        if lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev)) == b"RPC":
            continue
        if kind == GGML_BACKEND_DEVICE_TYPE_GPU:
            gpus.append(dev)
        elif kind == GGML_BACKEND_DEVICE_TYPE_IGPU:
            igpus.append(dev)
    return gpus or igpus


def device_list(devices: list[int]) -> Any:
    """A NULL-terminated ggml_backend_dev_t array for llama_model_params.devices (keep it
    alive until the model is loaded)."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
