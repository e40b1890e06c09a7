"""Portable sandbox, worker side: the call guard (no help from the operating system).

Every call is vetted before it runs **by the callee object**, never by the name the code used for it
(`getattr(os, 'sys' + 'tem')` is `os.system`):
- Python 3.12+: `sys.monitoring` (PEP 669): CALL events in user code give the callee object; PY_START events give
  the code object of every function that starts (the deny table's Python functions are caught whoever calls them);
  locations that are not user code are disabled, so library code runs at full speed;
- before 3.12: a profile hook (`sys.setprofile`, and `threading.setprofile` for threads started later):
  `c_call` events give the C function object a frame calls, `call` events the code object of the Python function
  that starts.

What counts as **user code**: any code object whose file is not under the interpreter's prefixes
(kernel/library.is_library) and not CRANE's own (`<crane-kernel/...>`): the cell, the notebook's functions,
lambdas, methods and classes (also when a library calls them back, e.g. `df.apply(lambda r: ...)`, a `__del__`,
a property, an operator), the user's own modules, code made by `exec`/namedtuple/dataclasses (`<string>`).
User code may call user code (whose own calls are vetted in turn). Library internals are not vetted call by call
(their own calls to `os` are what reading a CSV is made of): the audit hook (worker/portable.py) is the layer under
them.

**Refused** (`GUARD_TABLE`, one list per library): callables that write, delete, rename or change metadata of files
(writers are allowed when every path argument lies in the run's working folder: the write is then redirected into
the run's private folder, worker/portable.py), open network connections, start processes or threads that outlive
the call, load native code, or change the interpreter; C functions of `os` other than reads (`_OS_READS`) and the
path operations the audit layer redirects (`_OS_AUDITED`); builtins outside `BUILTINS_ALLOWED` (`exec`, `eval`,
`compile`, `breakpoint`); `gc`'s object walks, `sys.settrace`/`setprofile`/`addaudithook`, `signal`, `socket`,
`ctypes`, `_thread`, `_imp`, `fcntl`, `resource.setrlimit`.
A refusal calls `on_refuse(label)`, which, in the worker, writes the `blocked` record naming the call and ends the
process (nothing of the cell runs after it).
C code that calls a callable it is handed (`map`, `functools.partial`, `sorted(key=)`, ...) calls it where no hook
sees: those callables are replaced for a run with no OS layer and vet what user code hands them, and library code
that calls what it is handed (a thread's target, an executor, a finalizer; under the profile hook any library
function) is vetted when the cell hands it (`guard_combinators`, `CallGuard.handed_label`). Other processes'
entries of the process file system are refused on the resolved path (`other_process_entry`). Round 8: the refused C
methods are vetted in their types themselves (`vet_c_methods`, `replace_type_method`: any caller, any route) and the
refused C functions in their modules (`_arm_c_functions`), so no list of callers is needed for them.
Round 9: a C type whose construction opens a file has its `tp_new` reached only through a vetting `__new__`
(`replace_type_new`: pyarrow's `OSFile`, however the class is reached), and a function refused to user code alone
that library code calls is refused where the cell handed it to that library code (`_vet_handed_through`: 3.12+ too).
Not in the threat model: code written to escape a Python sandbox (docs/sandbox.md lists what stays open; the OS
sandbox on Linux holds all).
"""

from __future__ import annotations

import copyreg
import functools
import gc
import os
import re
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, NoReturn

from crane.sandbox.kernel.audit import _local_file_url  # kernel: strip
from crane.sandbox.kernel.library import _LB_GETCWD, _LB_LSTAT, _lb_realpath, is_library  # kernel: strip

GUARD_ANY = "any"  # vetted whoever calls it (library code included): writes, processes
GUARD_USER = "user"  # vetted only when user code calls it (libraries start threads, load ctypes, import modules)

# library -> [(module, attribute path, paths, scope[, (mode argument, default, read-only modes)])]
# paths None: refused; a tuple of argument names ("args[0]": the first positional of *args; "kwargs:name": that key of
# **kwargs): a writer, allowed when every one of those arguments that is a path lies in the run's working folder
# (redirected there), else refused.
GUARD_TABLE: dict[str, list[tuple]] = {
    "os": [("os", n, None, GUARD_ANY) for n in (
        "popen", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp",
        "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe")]
    + [("os", "makedirs", ("name",), GUARD_ANY), ("os", "removedirs", ("name",), GUARD_ANY),
       ("os", "renames", ("old", "new"), GUARD_ANY)],
    "shutil": [("shutil", n, a, GUARD_ANY) for n, a in (
        ("rmtree", ("path",)), ("copy", ("dst",)), ("copy2", ("dst",)), ("copyfile", ("dst",)),
        ("copymode", ("dst",)), ("copystat", ("dst",)), ("copytree", ("dst",)), ("move", ("src", "dst")),
        ("chown", ("path",)), ("make_archive", ("base_name",)), ("unpack_archive", ("extract_dir",)))],
    "subprocess": [("subprocess", n, None, GUARD_ANY) for n in (
        "Popen.__init__", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput")],
    "socket": [("socket", n, None, GUARD_USER) for n in (
        "socket.__init__", "create_connection", "create_server", "getaddrinfo", "socketpair", "fromfd")],
    "urllib": [("urllib.request", "urlopen", None, GUARD_ANY), ("urllib.request", "urlretrieve", None, GUARD_ANY)],
    "http": [("http.client", "HTTPConnection.connect", None, GUARD_ANY)],
    "webbrowser": [("webbrowser", "open", None, GUARD_ANY)],
    "requests": [("requests.sessions", "Session.send", None, GUARD_ANY)],
    "ctypes": [("ctypes", "CDLL.__init__", None, GUARD_USER), ("ctypes", "LibraryLoader.LoadLibrary", None, GUARD_USER),
               ("ctypes", "LibraryLoader.__getattr__", None, GUARD_USER),
               ("ctypes", "CDLL.__getattr__", None, GUARD_USER),  # ctypes.pythonapi.system, libc.setpriority
               ("ctypes", "CDLL.__getitem__", None, GUARD_USER)],
    # round 11: cffi, ctypes' sibling (a C function of any library called with no audit event: `setpriority` on
    # the kernel): what user code loads or casts into a callable C function refused, as ctypes' `CDLL`
    "cffi": [("cffi.api", f"FFI.{n}", None, GUARD_USER) for n in ("dlopen", "verify", "compile", "cast", "callback")],
    "psutil": [("psutil", f"Process.{n}", None, GUARD_ANY, (a, None, (None,))) for n, a in (
        ("nice", "value"), ("cpu_affinity", "cpus"), ("ionice", "ioclass"), ("rlimit", "limits"))]
    + [("psutil", f"Process.{n}", None, GUARD_USER) for n in (
        "send_signal", "terminate", "kill", "suspend", "resume")],
    "signal": [("signal", "signal", None, GUARD_USER)],
    "threading": [("threading", "Thread.start", None, GUARD_USER), ("threading", "Timer.__init__", None, GUARD_USER)],
    # round 7: library code that calls a callable the cell hands it (a thread's `run`, a pool's work item, a
    # finalizer): the callable is vetted as the cell's own call when it is handed ("handed:<argument>")
    "handed": [("threading", "Thread.__init__", ("handed:target",), GUARD_USER),
               ("concurrent.futures.thread", "ThreadPoolExecutor.submit", ("handed:fn",), GUARD_USER),
               ("concurrent.futures.thread", "_WorkItem.__init__", ("handed:fn",), GUARD_USER),
               ("concurrent.futures._base", "Executor.map", ("handed:fn",), GUARD_USER),
               ("weakref", "finalize.__init__", ("handed:func",), GUARD_USER)]
    + [("multiprocessing.pool", f"Pool.{n}", ("handed:func",), GUARD_USER) for n in (
        "apply", "apply_async", "map", "map_async", "imap", "imap_unordered", "starmap", "starmap_async")],
    "multiprocessing": [("multiprocessing.process", "BaseProcess.start", None, GUARD_ANY),
                        ("multiprocessing.pool", "Pool.__init__", None, GUARD_ANY),
                        ("concurrent.futures.process", "ProcessPoolExecutor.__init__", None, GUARD_ANY)],
    "inspect": [("inspect", n, None, GUARD_USER) for n in ("currentframe", "stack", "getouterframes", "trace")],
    "importlib": [("importlib", "import_module", None, GUARD_USER), ("importlib", "reload", None, GUARD_USER),
                  ("importlib.util", "spec_from_file_location", None, GUARD_USER)],
    "pandas": [("pandas.core.generic", f"NDFrame.{n}", a, GUARD_ANY) for n, a in (
        ("to_csv", ("path_or_buf",)), ("to_json", ("path_or_buf",)), ("to_hdf", ("path_or_buf",)),
        ("to_pickle", ("path",)), ("to_excel", ("excel_writer",)), ("to_sql", None), ("to_clipboard", None),
        ("to_latex", ("buf",)), ("to_markdown", ("buf",)), ("to_string", ("buf",)))]
    + [("pandas.core.frame", f"DataFrame.{n}", a, GUARD_ANY) for n, a in (
        ("to_parquet", ("path",)), ("to_feather", ("path",)), ("to_stata", ("path",)), ("to_orc", ("path",)),
        ("to_html", ("buf",)), ("to_xml", ("path_or_buffer",)), ("to_markdown", ("buf",)),
        ("to_string", ("buf",)))]
    + [("pandas.io.pytables", "HDFStore.__init__", ("path",), GUARD_ANY, ("mode", "a", ("r",))),
       ("pandas.io.excel._base", "ExcelWriter.__new__", ("path",), GUARD_ANY)],
    "numpy": [("numpy", n, a, GUARD_ANY) for n, a in (
        ("save", ("file",)), ("savez", ("file",)), ("savez_compressed", ("file",)), ("savetxt", ("fname",)))]
    + [("numpy", "memmap.__new__", ("filename",), GUARD_ANY, ("mode", "r+", ("r", "c", "readonly", "copyonwrite")))],
    "matplotlib": [("matplotlib.figure", "Figure.savefig", ("fname",), GUARD_ANY),
                   ("matplotlib.pyplot", "savefig", ("args[0]", "fname"), GUARD_ANY),
                   ("matplotlib.image", "imsave", ("fname",), GUARD_ANY),
                   ("matplotlib.animation", "Animation.save", ("filename",), GUARD_ANY)],
    "PIL": [("PIL.Image", "Image.save", ("fp",), GUARD_ANY)],
    "scipy": [("scipy.io", "savemat", ("file_name",), GUARD_ANY), ("scipy.sparse", "save_npz", ("file",), GUARD_ANY)],
    "joblib": [("joblib", "dump", ("filename",), GUARD_ANY)],
    "torch": [("torch.serialization", "save", ("f",), GUARD_ANY), ("torch.jit", "save", ("f",), GUARD_ANY),
              ("torch.onnx", "export", ("f",), GUARD_ANY)],
    "keras": [("keras.src.models.model", "Model.save", ("filepath",), GUARD_ANY),
              ("keras.src.models.model", "Model.save_weights", ("filepath",), GUARD_ANY),
              ("keras.src.saving.saving_api", "save_model", ("filepath",), GUARD_ANY)],
    "tensorflow": [("tensorflow", "saved_model.save", ("export_dir",), GUARD_ANY),
                   ("tensorflow", "io.write_file", ("filename",), GUARD_ANY),
                   ("tensorflow.python.profiler.profiler_v2", "start", ("logdir",), GUARD_ANY),
                   ("tensorflow.python.profiler.profiler_v2", "start_server", None, GUARD_ANY)],
    "h5py": [("h5py", "File.__init__", ("name",), GUARD_ANY, ("mode", "r", ("r",)))],
    "polars": [("polars", f"DataFrame.{n}", a, GUARD_ANY) for n, a in (
        ("write_csv", ("file",)), ("write_parquet", ("file",)), ("write_ipc", ("file",)), ("write_json", ("file",)),
        ("write_ndjson", ("file",)), ("write_avro", ("file",)), ("write_excel", ("workbook",)),
        ("write_delta", ("target",)), ("write_database", None))]
    + [("polars", f"DataFrame.{n}", ("file",), GUARD_ANY) for n in ("write_ipc_stream",)]
    + [("polars", f"LazyFrame.{n}", ("path",), GUARD_ANY) for n in ("sink_parquet", "sink_csv", "sink_ipc",
                                                                      "sink_ndjson")]
    # round 6: polars writers by path that the table missed (P3: `serialize(file)` writes in Rust)
    + [("polars", f"{c}.serialize", ("file",), GUARD_ANY) for c in ("DataFrame", "LazyFrame")]
    + [("polars", "DataFrame.write_iceberg", ("target",), GUARD_ANY),
       ("polars", "LazyFrame.sink_delta", ("target",), GUARD_ANY),
       ("polars", "LazyFrame.sink_iceberg", ("target",), GUARD_ANY)],
    "pyarrow": [("pyarrow.parquet", "write_table", ("where",), GUARD_ANY),
                ("pyarrow.parquet", "ParquetWriter.__init__", ("where",), GUARD_ANY),
                ("pyarrow.parquet", "write_to_dataset", ("root_path",), GUARD_ANY),
                ("pyarrow.dataset", "write_dataset", ("base_dir",), GUARD_ANY),
                ("pyarrow.orc", "write_table", ("where",), GUARD_ANY),
                ("pyarrow.orc", "ORCWriter.__init__", ("where",), GUARD_ANY),
                ("pyarrow.ipc", "new_file", ("sink",), GUARD_ANY),
                ("pyarrow.ipc", "new_stream", ("sink",), GUARD_ANY),
                ("pyarrow.ipc", "RecordBatchFileWriter.__init__", ("sink",), GUARD_ANY),
                ("pyarrow.ipc", "RecordBatchStreamWriter.__init__", ("sink",), GUARD_ANY),
                ("pyarrow.feather", "write_feather", ("dest",), GUARD_ANY),
                ("pyarrow.csv", "write_csv", ("output_file",), GUARD_ANY),
                # round 6: writers by path that the table missed (P3)
                ("pyarrow.parquet", "write_metadata", ("where",), GUARD_ANY),
                ("pyarrow.fs", "copy_files", ("destination",), GUARD_ANY)],
    # round 10: writers that call the library's C API through ctypes (no audit event for the file), profilers that
    # write their traces natively and serve them on a TCP port (worker/native.py vets the extension modules' own)
    "xgboost": [("xgboost", "Booster.save_model", ("fname",), GUARD_ANY),
                ("xgboost", "DMatrix.save_binary", ("fname",), GUARD_ANY),
                # round 12 (h7): external memory's cache pages, written in C++ at a `DataIter`'s `cache_prefix`;
                # vetted where every path of xgboost's reaches its C API, the JSON arguments made from the value
                # xgboost read (an attribute the cell may set after `__init__`, or serve by a property)
                ("xgboost.core", "make_jcargs", ("kwargs:cache_prefix",), GUARD_ANY),
                # round 12 (h7): the collective's communicator connects to its tracker in C++ (no socket of
                # Python's: a loopback service reached under the guard alone)
                ("xgboost.collective", "init", None, GUARD_ANY),
                ("xgboost.tracker", "RabitTracker.__init__", None, GUARD_ANY)],
    "lightgbm": [("lightgbm", "Booster.save_model", ("filename",), GUARD_ANY),
                 ("lightgbm", "Dataset.save_binary", ("filename",), GUARD_ANY),
                 # round 12 (h7): distributed training's network (`machines` in the parameters: the booster calls
                 # it) listens and connects in C++, no socket of Python's
                 ("lightgbm", "Booster.set_network", None, GUARD_ANY)],
    "jax": [("jax._src.profiler", "start_trace", ("log_dir",), GUARD_ANY),
            ("jax._src.profiler", "start_server", None, GUARD_ANY)],
    "datasets": [("datasets", "Dataset.save_to_disk", ("dataset_path",), GUARD_ANY)],
}

# C functions, by the module that defines them (the callee's own `__module__`/`__self__`), when user code calls them
_OS_READS = frozenset((
    "stat", "lstat", "fstat", "listdir", "scandir", "getcwd", "getcwdb", "getpid", "getppid", "getuid", "geteuid",
    "getgid", "getegid", "getgroups", "getlogin", "cpu_count", "urandom", "get_terminal_size", "fspath", "strerror",
    "access", "readlink", "uname", "times", "sched_getaffinity", "getloadavg", "device_encoding", "isatty",
    "get_blocking", "get_inheritable", "read", "pread", "readv", "lseek", "fsync", "fdatasync", "write", "pwrite",
    "writev", "close", "dup", "fdopen", "getpgrp", "getpgid", "getsid", "getpriority", "waitstatus_to_exitcode",
    "WIFEXITED", "WEXITSTATUS", "WIFSIGNALED", "WTERMSIG", "statvfs", "fstatvfs", "getenv", "get_exec_path",
    "sysconf", "pathconf", "fpathconf", "confstr", "getrandom", "major", "minor", "_path_normpath", "_fspath",
    "_path_splitroot", "_getfullpathname", "_getfinalpathname", "_path_isdir", "_path_isfile", "_path_exists",
    "_path_islink", "_path_isjunction", "_path_isdevdrive", "_getvolumepathname", "_getdiskusage", "get_handle_inheritable",
    "register_at_fork", "putenv", "unsetenv", "umask"))
# path operations the audit layer sees with their arguments (redirected into the run's folder, else refused)
_OS_AUDITED = frozenset((
    "open", "remove", "unlink", "rmdir", "mkdir", "rename", "replace", "chmod", "lchmod", "fchmod", "chown",
    "lchown", "fchown", "utime", "truncate", "ftruncate", "link", "symlink", "kill", "chdir", "fchdir",
    "setxattr", "removexattr", "listxattr", "getxattr"))
BUILTINS_ALLOWED = frozenset((
    "abs", "aiter", "all", "anext", "any", "ascii", "bin", "callable", "chr", "delattr", "dir", "divmod", "format",
    "getattr", "globals", "hasattr", "hash", "hex", "id", "isinstance", "issubclass", "iter", "len", "locals", "max",
    "min", "next", "oct", "ord", "pow", "print", "repr", "round", "setattr", "sorted", "sum", "vars", "open",
    "__build_class__", "__import__", "input"))
_C_DENY_ALL = frozenset(("_ctypes", "_cffi_backend", "_imp", "_posixsubprocess", "_winapi", "msvcrt",
                         "_multiprocessing",
                         "_posixshmem", "fcntl", "termios", "_testcapi", "_testinternalcapi", "_xxsubinterpreters",
                         "_interpreters", "_lsprof", "sys.monitoring"))
_C_DENY_SOME = {
    "sys": frozenset(("settrace", "setprofile", "addaudithook", "_setprofileallthreads", "_settraceallthreads",
                      "setdlopenflags", "remote_exec", "activate_stack_trampoline", "call_tracing",
                      "_getframe", "_getframemodulename")),  # CRANE's frames (P4): walked from the cell's, refused
    "gc": frozenset(("get_objects", "get_referrers", "get_referents", "freeze", "unfreeze", "set_debug")),
    "_thread": frozenset(("start_new_thread", "start_new", "start_joinable_thread", "interrupt_main")),
    "resource": frozenset(("setrlimit", "prlimit")),
    # the machine's clock (round 14, h4: a root kernel's worker set it; under the OS layer its capability is gone)
    "time": frozenset(("clock_settime", "clock_settime_ns")),
    "_socket": None,  # every function but the reads below (a socket's own methods: _C_METHODS)
    "_signal": None,  # every function but the reads below
    "faulthandler": None,  # (its dumps write to a descriptor, its `enable` and watchdog set handlers: all but a read)
    "posix": None,  # every function but _OS_READS and _OS_AUDITED
    "nt": None,
    "builtins": None,  # every builtin outside BUILTINS_ALLOWED
}
_C_ALLOW = {
    # this machine's name and the address conversions, which reach no other program (`socket.gethostname()` in a
    # run folder's name was `blocked` under the guard alone: red team round 17h, F9); name resolution stays refused
    "_socket": frozenset(("gethostname", "getdefaulttimeout", "htons", "ntohs", "htonl", "ntohl", "inet_aton",
                          "inet_ntoa", "inet_pton", "inet_ntop", "if_nameindex", "CMSG_LEN", "CMSG_SPACE")),
    "_signal": frozenset(("getsignal", "strsignal", "valid_signals", "getitimer", "default_int_handler")),
    "faulthandler": frozenset(("is_enabled",)),
    "posix": _OS_READS | _OS_AUDITED, "nt": _OS_READS | _OS_AUDITED, "builtins": BUILTINS_ALLOWED,
}
# methods of C types, refused when user code calls them
_C_METHODS = {("_socket", "socket"): frozenset(("connect", "connect_ex", "bind", "listen", "sendto", "sendmsg",
                                                 "sendfile")),
              ("numpy", "ndarray"): frozenset(("tofile",)),
              ("sqlite3", "Connection"): frozenset(("set_authorizer",)),  # CRANE's authorizer stays (P3)
              # a file system pyarrow made in C++ (`FileSystem.from_uri('file://...')`, a dataset's or a sub-tree's
              # `filesystem`/`base_fs`) is of pyarrow's own class, whose writers worker/arrow.py cannot vet: refused
              # to user code (those of arrow.py's `LocalFileSystem` are Python methods, vetted by path; round 7)
              ("pyarrow._fs", "FileSystem"): frozenset((
                  "open_output_stream", "open_append_stream", "create_dir", "delete_dir", "delete_dir_contents",
                  "delete_root_dir_contents", "delete_file", "move", "copy_file"))}
# names of those methods: `operator.methodcaller(name)` made by user code is refused for them (it calls the C method)
_C_METHOD_NAMES = frozenset(n for names in _C_METHODS.values() for n in names)

_FAMILY = {"posix": "os", "nt": "os", "_signal": "signal", "_socket": "socket", "_ctypes": "ctypes",
           "_cffi_backend": "cffi",
           "_thread": "threading", "_imp": "importlib", "_posixsubprocess": "subprocess", "_winapi": "subprocess",
           "_multiprocessing": "multiprocessing", "_posixshmem": "multiprocessing"}


_OWN_FILE = sys._getframe(0).f_code.co_filename  # this file (its code is never vetted)


_THIS_THREAD = threading.get_ident  # (bound when the worker's module is built: a cell's rebinding changes nothing)


class GuardRefusal(PermissionError):
    """What `on_refuse` raises when it returns (tests); the worker's `on_refuse` ends the process instead."""


def _resolve(module: str, path: str) -> Any:
    """The object at `module`.`path` if that module is loaded (no library is imported to build the table)."""
    obj = sys.modules.get(module)
    if obj is None:
        return None
    for part in path.split("."):
        obj = getattr(obj, part, None) if not isinstance(obj, type) else obj.__dict__.get(part, getattr(obj, part, None))
        if obj is None:
            return None
    return obj


def _codes_of(obj: Any) -> list[types.CodeType]:
    """The code objects a callable runs (its `__wrapped__` chain unwrapped; staticmethod/classmethod/property
    unpacked); decorators' shared wrapper codes are NOT included (they would refuse every decorated function)."""
    out, seen = [], 0
    while obj is not None and seen < 10:
        seen += 1
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            out.append(code)
        obj = getattr(obj, "__wrapped__", None)
    return out[-1:] if out else []


def _makes_nothing(entry: _Entry, loc: dict, value: Any) -> bool:
    """`os.makedirs(name, exist_ok=True)` of a folder that is already there changes nothing (a library making sure
    of its cache folder: torch's, matplotlib's): it goes on as in the kernel. The `os.mkdir` it still makes meets
    the audit layer, which answers FileExistsError without letting anything be created (worker/portable.py)."""
    if not entry.label.endswith("os.makedirs") or loc.get("exist_ok") is not True:
        return False
    try:
        return os.path.isdir(value)
    except (TypeError, ValueError):
        return False


_PROCESS_START = "multiprocessing: multiprocessing.process.BaseProcess.start"
# a thread the cell starts: refused where the guard is a per-call hook (a thread escapes a profile hook), allowed
# under the lean guard (round 14, h2): an OS layer holds every thread of the worker as it holds the main one, the
# audit hook and the lean replacements are process-wide, and the thread's target is vetted when the cell hands it
# (GUARD_TABLE "handed"); the kernel's answer for what the thread does (its os._exit: DeadKernelError) is then given
_THREAD_START = "threading: threading.Thread.start"
# writers of a folder of files (some of which may be there already): the folder is made private whole before
_DEEP = frozenset(("pyarrow: pyarrow.dataset.write_dataset", "pyarrow: pyarrow.parquet.write_to_dataset",
                   "pyarrow: pyarrow.fs.copy_files", "polars: polars.LazyFrame.sink_delta",
                   "polars: polars.DataFrame.write_delta", "datasets: datasets.Dataset.save_to_disk",
                   "tensorflow: tensorflow.saved_model.save"))
_MAX_CHILDREN = 64  # live fork children of one run (a DataLoader has num_workers)
# URL requests allowed for a local file (`pd.read_csv('file:///data/x.csv')`, pandas' `urlopen(Request(...))`): urllib's
# FileHandler reads it with `open`, which the audit layer vets as any read; a copy (`urlretrieve`'s `filename`) is an
# `open` for writing, vetted as every write. Any other URL stays refused (and its socket with it)
_LOCAL_URL_READS = frozenset(("urllib: urllib.request.urlopen", "urllib: urllib.request.urlretrieve"))
# `importlib.import_module(name)` called by the cell is what `import name` does (the builtins' `__import__` is
# allowed; a library imported so has its rows resolved at its import, as for the statement); `importlib.reload(m)`
# runs a module's source again: allowed for the notebook's own module (its code is user code, vetted as the cell's:
# `importlib.reload(utils)`, round 16 F11), refused for a library's (its fresh functions would not be the ones the
# table vetted). Handing either to other code (`map(importlib.import_module, ...)`) stays refused.
_IMPORT_MODULE, _RELOAD = "importlib: importlib.import_module", "importlib: importlib.reload"
_SOURCE_SUFFIXES = (".py", ".pyw", ".pyc")


_TO_SQL = "pandas: pandas.core.generic.NDFrame.to_sql"


def _to_sql_through_sqlite3(con: Any) -> bool:
    """`DataFrame.to_sql(name, con)` writes through Python's `sqlite3`, whose connections the audit layer vets (the
    database a private copy in the run's folder, ATTACH and VACUUM INTO authorized: worker/portable.py): `con` an
    exact `sqlite3.Connection`, or a SQLAlchemy URL of the `sqlite` dialect with its default driver (pysqlite).
    Another driver (ADBC's native SQLite, a server's) is refused as before (red team round 17h, F4)."""
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and type(con) is vars(sqlite3).get("Connection"):
        return True
    return type(con) is str and (con.startswith("sqlite:///") or con.startswith("sqlite+pysqlite:///"))


def reloads_user_source(module: Any) -> bool:
    """`importlib.reload(module)` would run a file of the notebook's own: `module` is an exact module of
    `sys.modules` by its name, and the first folder of its search path (`sys.path`, or its package's `__path__`)
    that holds its source is not the interpreter's libraries (reload finds the source again by name: a module whose
    `__file__` says otherwise is not believed). Read by exact types; nothing of the notebook's is called."""
    if type(module) is not types.ModuleType:
        return False
    md = vars(module)
    name = md.get("__name__")
    if type(name) is not str or not name or dict.get(sys.modules, name) is not module:
        return False
    parent, _, leaf = name.rpartition(".")
    if parent:
        pkg = dict.get(sys.modules, parent)
        path = vars(pkg).get("__path__") if type(pkg) is types.ModuleType else None
    else:
        path = sys.path
    if type(path) is not list:
        return False
    for entry in list.copy(path):
        if type(entry) is not str:
            return False  # (a path entry of another kind: a finder of its own would answer)
        folder = entry or _LB_GETCWD()
        for found in [os.path.join(folder, leaf + s) for s in _SOURCE_SUFFIXES] + [
                os.path.join(folder, leaf, "__init__.py")]:
            try:
                if not os.path.isfile(found):
                    continue
            except (TypeError, ValueError):
                return False
            return not is_library(found)
        try:
            if os.path.isdir(os.path.join(folder, leaf)) or any(
                    n.startswith(leaf + ".") and n.endswith((".so", ".pyd")) for n in os.listdir(folder)):
                return False  # a namespace package or an extension module comes first
        except OSError:
            continue
    return False


def multiprocessing_children() -> set | None:
    """multiprocessing's registry of the processes this one started, when it is the real set (read by exact type:
    the cell could have replaced it)."""
    mproc = sys.modules.get("multiprocessing.process")
    children = mproc.__dict__.get("_children") if type(mproc) is types.ModuleType else None
    return children if type(children) is set else None


def forks_a_child(proc: Any) -> bool:
    """`proc` (a multiprocessing process about to start) is multiprocessing's own process class and starts by
    `os.fork` (its context's start method is "fork": Linux's default before Python 3.14; a DataLoader's workers,
    a `Process` of the default context), and fewer than `_MAX_CHILDREN` are alive. Such a child is a copy of this
    process: the guard (this thread's profile hook, or sys.monitoring) and the audit hook hold in it, and it ends
    with the run's process tree. A spawned or forkserver child is a fresh interpreter with neither: refused."""
    ctx = sys.modules.get("multiprocessing.context")
    if type(ctx) is not types.ModuleType or proc is None:
        return False
    # what the cell could have replaced is read by exact type only (this runs inside the profile hook, unguarded)
    cd = ctx.__dict__
    children = multiprocessing_children()
    if children is None or set.__len__(children) >= _MAX_CHILDREN:
        return False  # a run starting processes without end
    t = type(proc)
    if t is cd.get("ForkProcess"):
        return True
    default = cd.get("_default_context")
    if t is not cd.get("Process") or type(default) is not cd.get("DefaultContext"):
        return False
    actual = default.__dict__.get("_actual_context") or default.__dict__.get("_default_context")
    return type(actual) is cd.get("ForkContext")


# the pools whose processes start by fork where the Linux layer holds the run (`CallGuard.pools`, worker/pools.py)
_FORK_POOLS = {"multiprocessing: multiprocessing.pool.Pool": ("context", "processes"),
               "multiprocessing: concurrent.futures.process.ProcessPoolExecutor": ("mp_context", "max_workers")}


def _a_thread_pool(pool: Any) -> bool:
    """`pool` is multiprocessing's own `ThreadPool` (threads only: also in a pool's process, where joblib's
    `prefer="threads"` makes one, e.g. a forest's predict inside a task)."""
    mpool = sys.modules.get("multiprocessing.pool")
    return type(mpool) is types.ModuleType and pool is not None and type(pool) is mpool.__dict__.get("ThreadPool")


def forks_a_pool(label: str, loc: dict) -> bool:
    """The pool being made (`loc`: its constructor's arguments) starts its processes by fork (its context, or the
    default one, is multiprocessing's fork context) and asks for fewer than `_MAX_CHILDREN` of them. Its processes
    are each vetted again as they start (`forks_a_child`); a `ThreadPool` starts none."""
    ctx = sys.modules.get("multiprocessing.context")
    if type(ctx) is not types.ModuleType:
        return False
    cd = ctx.__dict__
    context_arg, count_arg = _FORK_POOLS[label]
    count = loc.get(count_arg)
    if count is not None and (type(count) is not int or count >= _MAX_CHILDREN):
        return False
    context = loc.get(context_arg)
    if context is None:
        default = cd.get("_default_context")
        if type(default) is not cd.get("DefaultContext"):
            return False
        context = default.__dict__.get("_actual_context") or default.__dict__.get("_default_context")
    return type(context) is cd.get("ForkContext")


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _local_path(value: Any) -> Any:
    """The local path a writer's path argument names: the path itself, or a `file://` URL's path (pyarrow, polars
    and fsspec open those themselves: the text is not a relative path in the working folder, round 6 P1/P3);
    None for a URL of any other scheme (another file system: s3://, memory://, hdfs://, ...)."""
    text = value if isinstance(value, str) else value.decode("utf-8", "replace") if isinstance(value, bytes) else None
    if text is None or not _URL.match(text):
        return value
    from urllib.parse import unquote, urlsplit
    parts = urlsplit(text)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        return None
    return unquote(parts.path)


def _url_text(url: Any) -> Any:
    """The text of a URL request's `url` argument: a `str`, or the full URL of a `urllib.request.Request` of
    urllib's own class (pandas hands one); None for anything else (refused as before)."""
    if type(url) is str:
        return url
    request = sys.modules.get("urllib.request")
    if request is not None and type(url) is getattr(request, "Request", None):
        full = url.full_url
        return full if type(full) is str else None
    return None


# a writer's file-system argument (pyarrow's `filesystem=`, `destination_filesystem=`): each resolver (worker/arrow.py
# adds pyarrow's) gives (kind, the local path it names) for a file system it knows, else None; "local" paths are
# vetted as any path, `_NOT_NATIVE_FS` ones are not native writes, any other kind (s3, gcs, ...) is refused
FILE_SYSTEM_PATHS: list[Callable[[Any, Any], tuple[str, Any] | None]] = []
_NOT_NATIVE_FS = ("mock", "py")


def _through_file_system(fs: Any, path: Any) -> tuple[str, Any]:
    """(kind, path) of `path` in file system `fs` as a resolver knows it; ("", path) where none does."""
    for resolve in FILE_SYSTEM_PATHS:
        got = resolve(fs, path)
        if got is not None:
            return got
    return "", path


_PARTIAL = functools.partial  # (the C type, bound at import: the cell may replace `functools.partial`)
_PARTIAL_FUNC = _PARTIAL.__dict__["func"]


def _method_label(t: type, fn: Any) -> str:
    """The refusal label of C method `fn` of a `t` (`_C_METHODS`, by its classes), or ""."""
    try:
        mro = type.__dict__["__mro__"].__get__(t)
    except TypeError:
        return ""
    for klass in mro:
        names = _C_METHODS.get((getattr(klass, "__module__", ""), klass.__name__))
        if names and getattr(fn, "__name__", "") in names:
            return f"{_FAMILY.get(klass.__module__, klass.__module__)}: {klass.__name__}.{fn.__name__}"
    return ""


def _crane_code(code: types.CodeType) -> bool:
    name = code.co_filename or ""
    return name.startswith("<crane-kernel/") or name == _OWN_FILE


_HIDDEN_BUDGET, _HIDDEN_ITEMS = 512, 64  # objects looked into for a hidden refused callable; items per container
_EMPTY_CELL = types.CellType()  # (an empty closure cell compares equal to this one only)
_BUILTINS_DICT = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (by a `class` statement or `type()`), not a C type
_HANDED_TYPES = (types.BuiltinFunctionType, types.MethodDescriptorType, types.ClassMethodDescriptorType)


def _handed_kind(value: Any) -> bool:
    """`value` may be a C callable the guard refuses (`CallGuard.handed_label` says which)."""
    t = type(value)
    return t in _HANDED_TYPES or isinstance(value, (_PARTIAL, types.BuiltinFunctionType, type)) \
        or t is types.MethodType or t is types.FunctionType \
        or t.__name__ == "cython_function_or_method"  # (PyCMethod: `builtin_method`)


def _arguments_of(frame: types.FrameType) -> dict:
    """A frame's arguments by name (its parameters, `*args` and `**kwargs` included; not its other locals)."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # CO_VARARGS, CO_VARKEYWORDS
    loc = frame.f_locals
    return {name: loc[name] for name in code.co_varnames[:n] if name in loc}


def _as_given(orig: Any, new: str) -> Any:
    """`new` in the type of the path argument it replaces (`bytes`, a `PurePath` subclass, else `str`)."""
    if isinstance(orig, bytes):
        return os.fsencode(new)
    if isinstance(orig, os.PathLike) and not isinstance(orig, str):
        try:
            kind: Any = type(orig)
            return kind(new)
        except Exception:  # noqa: BLE001 - a PathLike that cannot be made from text: the text itself
            return new
    return new


# 3.11's profile hook: CPython copies the frame's `f_locals` back into the frame after the hook returns
# (call_trampoline's PyFrame_LocalsToFast); 3.13's `f_locals` writes through; 3.12's does neither
_FRAME_WRITES = sys.version_info < (3, 12) or sys.version_info >= (3, 13)


def _put_argument(loc: dict, spec: str, value: Any) -> bool:
    """Set the argument `spec` names (`_vet_entry`'s forms) in `loc`; False where it cannot be set."""
    if spec.startswith("args["):
        seq, i = loc.get("args"), int(spec[5:-1])
        if type(seq) is not tuple or len(seq) <= i:
            return False
        loc["args"] = seq[:i] + (value,) + seq[i + 1:]
        return True
    if spec.startswith("kwargs:"):
        kw = loc.get("kwargs")
        if type(kw) is not dict:
            return False
        kw[spec[7:]] = value
        return True
    if spec not in loc:
        return False
    loc[spec] = value
    return True


class _Entry:
    __slots__ = ("label", "paths", "scope", "mode")

    def __init__(self, label: str, paths: tuple[str, ...] | None, scope: str, mode: tuple | None) -> None:
        self.label, self.paths, self.scope, self.mode = label, paths, scope, mode


class CallGuard:
    """The guard of one run. `inside(path)`: may a writer write there (the run's working folder); `prepare(path)`:
    make a path inside ready for a write (worker/portable.RunFolder.materialize); `on_refuse(label)`: called with
    what was refused (the worker's ends the run: `blocked`)."""

    def __init__(self, on_refuse: Callable[[str], object], inside: Callable[[Any], bool] = lambda p: False,
                 prepare: Callable[[Any], object] = lambda p: None, table: dict | None = None,
                 fork_children: bool = False, prepare_tree: Callable[[Any], object] | None = None,
                 lean: bool = False) -> None:
        self.on_refuse = on_refuse
        # an OS layer holds the worker (Landlock ran): no per-call hook, profile hook or `sys.monitoring` (the
        # table's functions and the refused C functions are replaced instead; see "The lean guard" below)
        self.lean = lean
        # a run that ends its process tree with it: multiprocessing's fork children of this process are allowed
        # (they inherit the guard and the audit hook; `forks_a_child`)
        self.fork_children = fork_children
        # the Linux layer holds the run as well (set by the worker): pools that fork (`forks_a_pool`) may start
        self.pools = False
        # what gives way to the OS layer underneath: a library's import-time program or socket bind (worker/imports.py)
        self.leeway: Callable[[str], bool] = lambda what: False
        self.pid = os.getpid()
        self.inside = inside
        self.prepare = prepare
        self.prepare_tree = prepare_tree or prepare  # a folder a writer fills (`_DEEP`): made private whole
        # the run folder's counterpart of a path into the real working folder (worker/abs_paths.py), else None: a
        # writer's path argument is replaced by it where the call can be given it (`_vet_entry`'s `rewrite`)
        self.translate: Callable[[Any], str | None] = lambda p: None
        self.table = GUARD_TABLE if table is None else table
        self.codes: dict = {}  # code object -> _Entry (Python callables of the deny table)
        self.classes: dict = {}  # class -> _Entry (a class whose construction is refused)
        self.pending: list = []  # table rows whose module is not loaded yet
        self.user: dict = {}  # code object -> is user code
        self.c_cache: dict = {}  # id(C function) -> refusal label or "" (module functions only; kept alive below)
        self.c_alive: list = []
        self.dirty = False  # a module was imported since the table was last resolved (the audit layer sets it)
        self.nmods = 0  # len(sys.modules) when the table was last resolved: a change means an import
        self.hot: list = []  # modules with rows still pending that were being imported then (`_hot_done`)
        self._on = False  # guarding every thread (`install`); see `active`
        self._off_thread: int | None = None  # the thread `leave` stopped guarding (only that one)
        self.tool: int | None = None
        self.unarmed: list = []  # (function, entry) of the table not yet given a trampoline (lean)
        self.originals: dict = {}  # function -> its own code, where the lean guard gave it a trampoline
        self.armed = False  # the lean guard's replacements are in place (they stay; `active` switches them)
        self._busy = False  # the lean guard is reading frames (its own sys._getframe is not vetted)
        self.after_import: list[Callable[[], object]] = []  # run when libraries loaded since are resolved
        # library files claimed by code the import system did not make (worker/imports.CodeProvenance): every code
        # object naming one is user code (round 17, F1/F2)
        self.forged: set[str] = set()
        self.provenance: Any = None  # (worker/imports.CodeProvenance: told of each trampoline the guard gives)
        self._resolve_table()

    # -- the table ---------------------------------------------------------------------------------------
    def _resolve_table(self) -> None:
        self.nmods = len(sys.modules)
        rows = self.pending or [(fam, row) for fam, rows in self.table.items() for row in rows]
        self.pending = []
        hot: list = []
        for fam, row in rows:
            module, path, paths, scope = row[:4]
            mode = row[4] if len(row) > 4 else None
            obj = _resolve(module, path)
            if obj is None:
                loaded = sys.modules.get(module)
                if loaded is None:
                    self.pending.append((fam, row))  # resolved when the library is imported
                elif getattr(getattr(loaded, "__spec__", None), "_initializing", False):
                    self.pending.append((fam, row))
                    if loaded not in hot:
                        hot.append(loaded)  # its module is being imported now: look again once it is done
                continue
            label = f"{module}.{path}".replace(".__init__", "").replace(".__new__", "")
            entry = _Entry(f"{fam}: {label}", paths, scope, mode)
            for code in _codes_of(obj):
                self.codes.setdefault(code, entry)
            fn = _function_of(obj)
            if fn is not None:
                self.unarmed.append((fn, entry))
        # (round 9: before, a row whose module was being imported made every call event resolve the whole table
        # again until that import ended — every call of `import tensorflow`, whose rows wait for the whole import:
        # now the rows are resolved again at the next import, or once such a module is done: `_hot_done`)
        self.dirty, self.hot = False, hot
        if self.armed and self.unarmed:
            self._arm_functions()
        for after in self.after_import:
            after()

    def refresh(self) -> None:
        """Resolve the rows of libraries imported since (called when the audit layer saw an import)."""
        if self.pending:
            self._resolve_table()
        else:
            self.dirty, self.hot = False, []
            self.nmods = len(sys.modules)

    def _hot_done(self) -> bool:
        """A module the table waits for, being imported when the table was last resolved, is done now."""
        for mod in self.hot:
            if not getattr(getattr(mod, "__spec__", None), "_initializing", False):
                return True
        return False

    # -- what is user code ---------------------------------------------------------------------------------
    def is_user(self, code: types.CodeType) -> bool:
        u = self.user.get(code)
        if u is None:
            name = code.co_filename or ""
            if type(name) is not str:  # (a str subclass's methods would run here: never a library's file)
                u = True
            else:
                u = name in self.forged or not (name.startswith("<crane-kernel/") or name.startswith("<frozen ")
                                                or name == _OWN_FILE or is_library(name))
            self.user[code] = u
        return u

    def trust(self, *codes: types.CodeType) -> None:
        """Treat these code objects as CRANE's own (not vetted; tests that install the guard from a test file)."""
        for code in codes:
            self.user[code] = False

    # -- vetting -------------------------------------------------------------------------------------------
    def _refuse(self, label: str) -> NoReturn:
        self.on_refuse(f"a call to {label}")
        raise GuardRefusal(f"crane sandbox: a call to {label} is refused")

    def vet_c(self, fn: Any) -> None:
        """A C function (or a bound C method) that user code calls."""
        owner = getattr(fn, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            key = id(fn)
            label = self.c_cache.get(key)
            if label is None:
                label = self._c_label(fn, owner)
                self.c_cache[key] = label
                self.c_alive.append(fn)
            if label:
                self._refuse(label)
            return
        if isinstance(owner, type):
            return  # a type's slot wrappers and class methods (tuple.__new__, dict.fromkeys): no side effect
        self._vet_method(type(owner), fn)

    def _vet_method(self, t: type, fn: Any) -> None:
        label = _method_label(t, fn)
        if label:
            self._refuse(label)

    def handed_label(self, obj: Any) -> str:
        """What user code may not call, for a callable it hands to code that will call it (`map`, `partial`, a
        thread's target, ...): a C function or C method the guard refuses to user code (also inside a `partial`),
        as its refusal label; a Python function or class of the table refused to user code alone (`GUARD_USER`:
        `ctypes.CDLL`, a `CDLL`'s `__getattr__`, `importlib.import_module`; round 8: code it is handed to is the
        cell's agent, not a library calling it for its own sake); "" for anything else (other Python callables are
        vetted when they start)."""
        for _ in range(8):
            if not isinstance(obj, _PARTIAL):
                break
            obj = _PARTIAL_FUNC.__get__(obj)  # (the C member: a subclass cannot pretend another `func`)
        user_only = self._user_only_label(obj)
        if user_only:
            return user_only
        if isinstance(obj, types.BuiltinFunctionType):
            owner = obj.__self__
            if owner is None or isinstance(owner, types.ModuleType):
                key = id(obj)
                label = self.c_cache.get(key)
                if label is None:
                    label = self.c_cache[key] = self._c_label(obj, owner)
                    self.c_alive.append(obj)
                return label
            return "" if isinstance(owner, type) else _method_label(type(owner), obj)
        if isinstance(obj, (types.MethodDescriptorType, types.ClassMethodDescriptorType)):
            return _method_label(obj.__objclass__, obj)
        if isinstance(obj, types.MethodType) and not isinstance(obj.__func__, types.FunctionType):
            return _method_label(type(obj.__self__), obj.__func__)  # a Cython method bound (pyarrow's file systems)
        if type(obj).__name__ == "cython_function_or_method":  # a Cython method taken from its class
            owner, _, name = str(getattr(obj, "__qualname__", "")).rpartition(".")
            names = _C_METHODS.get((str(getattr(obj, "__module__", "")), owner))
            if names and name in names:
                return f"{_FAMILY.get(obj.__module__, obj.__module__)}: {owner}.{name}"
        return ""

    def _user_only_label(self, obj: Any) -> str:
        """The label of the table's `GUARD_USER` refusal (no path arguments) that calling `obj` makes, or ""."""
        t = type(obj)
        if t is types.MethodType:
            obj, t = obj.__func__, type(obj.__func__)
        if t is types.FunctionType:
            codes = [self.code_of(obj)]
        elif isinstance(obj, type):
            try:
                mro = type.__dict__["__mro__"].__get__(obj)
            except TypeError:
                return ""
            init = next((k.__dict__["__init__"] for k in mro if "__init__" in k.__dict__), None)
            codes = [self.code_of(f) for f in ((init,) if type(init) is types.FunctionType else ())]
        else:
            return ""
        for code in codes:
            entry = self.codes.get(code)
            if entry is not None and entry.scope == GUARD_USER and entry.paths is None and entry.mode is None:
                return entry.label
        return ""

    def vet_handed(self, obj: Any) -> None:
        label = self.handed_label(obj)
        if label:
            self._refuse(f"{label} (handed to code that calls it)")

    def _c_label(self, fn: Any, owner: Any) -> str:
        mod = getattr(owner, "__name__", None) if owner is not None else getattr(fn, "__module__", None)
        mod = mod or getattr(fn, "__module__", None) or ""
        name = getattr(fn, "__name__", "") or ""
        fam = _FAMILY.get(mod, mod)
        if mod in _C_DENY_ALL:
            return f"{fam}: {mod}.{name}"
        some = _C_DENY_SOME.get(mod, ())
        if some is None and name not in _C_ALLOW[mod] or some and name in some:
            return f"builtins: {name}" if mod == "builtins" else f"{fam}: {mod}.{name}"
        return ""

    def vet_start(self, code: types.CodeType, frame: types.FrameType, rewrite: bool = False) -> None:
        """A Python function of the deny table starts (`frame`: its frame, its arguments in `f_locals`; `rewrite`:
        what is set in `f_locals` reaches the function, `_FRAME_WRITES`)."""
        entry = self.codes.get(code)
        if entry is None:
            return
        back = frame.f_back
        if back is not None and entry.scope == GUARD_USER and entry.paths is None and entry.mode is None \
                and not self.is_user(back.f_code):
            self._vet_handed_through(back)
        self._vet_entry(entry, frame.f_locals, back.f_code if back is not None else None, rewrite)

    def _vet_handed_through(self, back: types.FrameType) -> None:
        """A function refused to user code alone starts, called by library code (round 9: judged by the function,
        not only by its caller). Where that library code runs for the cell — the nearest user frame up the stack
        called it — and the cell handed it a refused callable (in the arguments of the library function the cell
        called, or of the function's direct caller: `json.loads(s, parse_int=ctypes.CDLL)`, whose C scanner calls
        it), the call is the cell's: refused as its own. On 3.11 the profile hook's argument scan refuses the same
        hand-over earlier; on 3.12+ (`sys.monitoring` sees no arguments) this is where it is caught. A library's
        own call (no user frame above it, or nothing refused handed to it) goes on."""
        frames: list[types.FrameType] = []
        f: types.FrameType | None = back
        while f is not None and not self.is_user(f.f_code):
            if len(frames) > 512:
                return
            frames.append(f)
            f = f.f_back
        if f is None:
            return  # a library's own thread: nothing of the cell's called it
        # (round 10: and the cell's own objects among the arguments of the library frames between: a decoder of the
        # cell's class, whose attribute its scanner calls, is an argument of `raw_decode`, not of `json.loads`)
        ends = [frames[0], frames[-1]]
        self._vet_handed_within([_arguments_of(f) for f in ends if not _crane_code(f.f_code)],
                                [_arguments_of(f) for f in frames[1:-1] if not _crane_code(f.f_code)])

    def _vet_handed_within(self, locs: list[dict], between: list[dict]) -> None:
        """Round 10: `_vet_handed_arguments` over the arguments of the library function the cell called and of the
        refused function's caller (`locs`), and the objects of the cell's own classes among the arguments of the
        library frames between (`between`), also for a refused callable hidden inside what was handed — in a
        container, a `partial`'s arguments, a bound method's object, an object of the cell's own classes (its
        attributes, its class's: `class C: __call__ = staticmethod(ctypes.CDLL)`), a function of the cell's (its
        closure, defaults). Library objects are not looked into (their own references are the library's). Runs only
        when a function refused to user code alone starts from library code that the cell called (never per call),
        over a bounded number of objects."""
        todo: list = [v for loc in between for v in dict.values(loc) if self._users_class(type(v))]
        todo += [v for loc in locs for v in dict.values(loc)]  # (the library function the cell called, and the caller)
        seen: set[int] = set()
        budget = _HIDDEN_BUDGET
        while todo and budget > 0:
            value = todo.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            budget -= 1
            if _handed_kind(value):
                label = self.handed_label(value)
                if label:
                    self._refuse(f"{label} (handed to code that calls it)")
            todo.extend(self._hidden_in(value))

    def _hidden_in(self, value: Any) -> list:
        """What `value` holds that code calling it could call (`_vet_handed_within`); [] for a library's object."""
        t = type(value)
        if t in (tuple, list, set, frozenset):
            return list(value)[:_HIDDEN_ITEMS]
        if t is dict:  # (not a module's namespace: its builtins and functions are the module's, not handed)
            name = dict.get(value, "__name__")
            mod = sys.modules.get(name) if type(name) is str else None
            if "__builtins__" in value or value is _BUILTINS_DICT or type(mod) is types.ModuleType \
                    and mod.__dict__ is value:
                return []
            return list(dict.values(value))[:_HIDDEN_ITEMS]
        if isinstance(value, _PARTIAL):
            return [_PARTIAL_FUNC.__get__(value), *_PARTIAL.__dict__["args"].__get__(value)[:_HIDDEN_ITEMS],
                    *dict.values(_PARTIAL.__dict__["keywords"].__get__(value) or {})]
        if t is types.MethodType:
            return [value.__func__, value.__self__]
        if t in (staticmethod, classmethod):
            return [value.__func__]
        if t is types.FunctionType:
            if not self.is_user(self.code_of(value)):
                return []
            cells = [c.cell_contents for c in value.__closure__ or () if c != _EMPTY_CELL]
            return [*cells, *(value.__defaults__ or ()), *dict.values(value.__kwdefaults__ or {})]
        if isinstance(value, type):
            return list(dict.values(_gd_type_dict(value)))[:_HIDDEN_ITEMS] if self._users_class(value) else []
        if not self._users_class(t):
            return []
        out: list = []
        for r in _GD_REFERENTS(value):  # (its `__dict__`, slots and class, read with no code of the cell's)
            out += list(dict.values(r))[:_HIDDEN_ITEMS] if type(r) is dict else [r]
        return out

    def _users_class(self, t: type) -> bool:
        """`t` was made by the cell or the user's own modules: a heap type whose module is `__main__` (the cell's
        namespace; the process's own `__main__` may be a library's launcher), or is a file of the user's, or does not
        hold it under its name (a class of the cell's that names a library's module, or made at run time: judged by a
        function of its own, else counted as the cell's). A library's own classes, and C types, are not."""
        if not type.__dict__["__flags__"].__get__(t) & _HEAPTYPE:
            return False
        try:
            d = _gd_type_dict(t)
        except (TypeError, StopIteration):
            return False
        modname = d.get("__module__")
        if modname == "__main__":
            return True
        mod = sys.modules.get(modname) if type(modname) is str else None
        held: Any = mod if type(mod) is types.ModuleType else None
        for part in str(type.__dict__["__qualname__"].__get__(t)).split("."):  # (not in the type's own dict)
            held = held.__dict__.get(part) if isinstance(held, (types.ModuleType, type)) else None
        if held is t and mod is not None:
            name = mod.__dict__.get("__file__")
            return isinstance(name, str) and not is_library(name)
        for v in dict.values(d):
            if type(v) is types.FunctionType:
                return self.is_user(self.code_of(v))
        return True

    def _vet_entry(self, entry: _Entry, loc: dict, caller: types.CodeType | None, rewrite: bool = False) -> bool:
        """A call of the table's function `entry` with arguments `loc` (by parameter name), from `caller`. `rewrite`:
        the caller hands the function `loc` as changed here: a path into the real working folder is then replaced by
        its run-folder counterpart (`translate`), else refused as any path outside. True: `loc` was changed."""
        changed = False
        if entry.scope == GUARD_USER and (caller is None or not self.is_user(caller)):
            return False
        if entry.paths is None:
            if entry.mode is not None:
                self._refuse(entry.label)
            if entry.label in _LOCAL_URL_READS and _local_file_url(_url_text(loc.get("url"))):
                return False
            if entry.label == _IMPORT_MODULE or entry.label == _RELOAD and reloads_user_source(loc.get("module")):
                return False
            if entry.label == _TO_SQL and _to_sql_through_sqlite3(loc.get("con")):
                return False
            if entry.label == _PROCESS_START and self.fork_children and forks_a_child(loc.get("self")) \
                    and os.getpid() == self.pid:
                return False
            if entry.label in _FORK_POOLS and self.pools and self.fork_children and (
                    _a_thread_pool(loc.get("self")) or os.getpid() == self.pid and forks_a_pool(entry.label, loc)):
                return False
            if entry.label == _THREAD_START and self.lean:
                return False
            if self.leeway(entry.label):
                return False
            self._refuse(entry.label)
        if entry.mode is not None:
            arg, default, readonly = entry.mode
            mode = loc.get(arg, default)
            if (mode is None or isinstance(mode, str)) and mode in readonly:
                return False
        for spec in entry.paths:
            if spec.startswith("handed:"):
                self.vet_handed(loc.get(spec[7:]))
                continue
            if spec.startswith("args["):
                seq = loc.get("args") or ()
                value = seq[int(spec[5:-1])] if len(seq) > int(spec[5:-1]) else None
            elif spec.startswith("kwargs:"):  # a keyword of a `**kwargs` function; "" names no path (xgboost's)
                kw = loc.get("kwargs")
                value = dict.get(kw, spec[7:]) if type(kw) is dict else None
                if isinstance(value, (str, bytes)) and not value:
                    continue
            else:
                value = loc.get(spec)
            fs = loc.get("filesystem", loc.get("destination_filesystem"))
            if fs is not None and isinstance(value, (str, bytes, os.PathLike)):
                kind, value = _through_file_system(fs, value)
                if kind not in ("local", "", *_NOT_NATIVE_FS):
                    self._refuse(f"{entry.label} (writing through a {kind!r} file system)")
                if kind in _NOT_NATIVE_FS:
                    continue  # in memory, or a Python handler whose own opens the audit hook sees
            if isinstance(value, (str, bytes, os.PathLike)):
                given = value
                value = _local_path(value)
                if value is None:
                    self._refuse(f"{entry.label} (writing to a URL)")
                moved = self.translate(value) if rewrite and value is given and fs is None else None
                if moved is not None and _put_argument(loc, spec, _as_given(value, moved)):
                    value, changed = moved, True
                if not self.inside(value):
                    if _makes_nothing(entry, loc, value):
                        continue
                    self._refuse(f"{entry.label} (writing {os.fsdecode(value)[:200]!r} outside the cell's working "
                                 "folder)")
                (self.prepare_tree if entry.label in _DEEP else self.prepare)(value)
        return changed

    # -- the hooks -------------------------------------------------------------------------------------------
    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "c_call":
            code = frame.f_code
            u = self.user.get(code)
            if u is None:
                u = self.is_user(code)
            if u:
                self.vet_c(arg)
        elif event == "call":
            if self.dirty or len(sys.modules) != self.nmods or self.hot and self._hot_done():
                self.refresh()
            entry = self.codes.get(frame.f_code)
            if entry is not None:
                self.vet_start(frame.f_code, frame, _FRAME_WRITES)
            back = frame.f_back
            if back is not None and self.is_user(back.f_code) and not self.is_user(frame.f_code) \
                    and not _crane_code(frame.f_code):  # (CRANE's own wrappers hold the originals they call)
                self._vet_handed_arguments(frame.f_locals)

    def _vet_handed_arguments(self, loc: dict) -> None:
        """User code calls library code (the profile hook's `call`): a refused C callable among its arguments (or
        in a tuple, list or dict of them: `args=`, `kwargs=`) would be called by that code on the cell's behalf
        (`Thread(target=...).run()`, an executor's work item, `df.apply(...)`): refused as the cell's own call."""
        for value in dict.values(loc):
            t = type(value)
            if t in (tuple, list) and len(value) <= 32:
                for item in value:
                    if _handed_kind(item):
                        self.vet_handed(item)
            elif t is dict and len(value) <= 32:
                for item in dict.values(value):
                    if _handed_kind(item):
                        self.vet_handed(item)
            elif _handed_kind(value):
                self.vet_handed(value)

    @property
    def active(self) -> bool:
        """Whether the calling thread is guarded: every thread from `install` on, all but the one that called
        `leave` after it, none after `uninstall` (set directly: every thread or none)."""
        return self._on or (self._off_thread is not None and _THIS_THREAD() != self._off_thread)

    @active.setter
    def active(self, on: bool) -> None:
        self._on, self._off_thread = bool(on), None

    def _off_here(self) -> bool:
        """The calling thread is the one `leave` stopped guarding (the hooks let its calls through)."""
        return not self._on and self._off_thread is not None and _THIS_THREAD() == self._off_thread

    def install(self) -> str:
        """Start guarding this thread and threads started later; the mechanism's name."""
        self._on, self._off_thread = True, None
        if self.lean:
            self.arm()
            return LEAN_MECHANISM
        mon = getattr(sys, "monitoring", None)
        if mon is not None:
            if self.tool is not None and mon.get_tool(self.tool) is None:
                self.tool = None  # (freed meanwhile: an epilogue's that did not keep it)
            if self.tool is None:
                return self._install_monitoring(mon)
            mon.set_events(self.tool, mon.events.CALL | mon.events.PY_START)  # (still ours since `leave`)
            return MONITORING_MECHANISM
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        return "sys.setprofile"

    def uninstall(self) -> None:
        """Stop guarding every thread: the hooks removed (a guard that is done with, as in tests)."""
        self._on, self._off_thread = False, None
        mon = getattr(sys, "monitoring", None)
        if mon is not None and self.tool is not None:
            mon.set_events(self.tool, 0)
            mon.register_callback(self.tool, mon.events.CALL, None)
            mon.register_callback(self.tool, mon.events.PY_START, None)
            mon.free_tool_id(self.tool)
            self.tool = None
            return
        if self.lean:
            return  # the replacements stay, switched off by `active`
        sys.setprofile(None)
        threading.setprofile(None)

    def leave(self) -> None:
        """Stop guarding the calling thread alone: CRANE's, whose own work follows the cell (its record, the end of
        the run's processes) or a refusal. Every other thread stays guarded until the process ends, as it was during
        the cell: one the cell started and left running, a pool's or an executor's worker still running the cell's
        function, and any thread they start (issue 40: under the guard alone, such a thread called `ctypes`' `kill`
        on the kernel once the guard's `sys.monitoring` tool, process-wide, was freed at the cell's end). The hooks
        stay in place and let the calling thread's calls through (`_off_here`); 3.11's profile hook is unset for it
        alone. `install` takes the guard back for every thread (a session's next command)."""
        self._on, self._off_thread = False, _THIS_THREAD()
        if self.lean or getattr(sys, "monitoring", None) is not None:
            return  # the lean replacements and the monitoring callbacks ask `active` / `_off_here`
        sys.setprofile(None)

    def _install_monitoring(self, mon: Any) -> str:  # Python 3.12+ (tests/sandbox/test_portable_guard_interpreters.py)
        for tool in (4, 3, 5):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "crane-guard")
                self.tool = tool
                break
        else:
            raise RuntimeError("no sys.monitoring tool id is free for the call guard")
        disable = mon.DISABLE

        def on_call(code: types.CodeType, offset: int, callee: object, arg0: object) -> object:
            if not self.is_user(code):
                return disable
            if self._off_here():
                return None  # (not DISABLE: the location stays watched for the threads still guarded)
            if isinstance(callee, (types.BuiltinFunctionType, types.BuiltinMethodType)):
                self.vet_c(callee)
            elif isinstance(callee, types.MethodDescriptorType):  # `sock.connect(...)`: the unbound descriptor
                self._vet_method(callee.__objclass__, callee)
            return None

        def on_start(code: types.CodeType, offset: int) -> object:
            # the table brought up to date first, on CRANE's thread too once it is off (review r1 L2): DISABLE is
            # for the code location, every thread's; from a stale table (a library imported since, its guarded
            # functions not yet in `codes`) it would have switched off the vetting of the threads the cell left
            # running wherever CRANE's thread started one of those functions first
            if self.dirty or len(sys.modules) != self.nmods or self.hot and self._hot_done():
                self.refresh()
                mon.restart_events()
            if self._off_here():
                return None if code in self.codes else disable
            if code not in self.codes:
                return disable
            self.vet_start(code, sys._getframe(1), sys.version_info >= (3, 13))
            return None

        mon.register_callback(self.tool, mon.events.CALL, on_call)
        mon.register_callback(self.tool, mon.events.PY_START, on_start)
        mon.set_events(self.tool, mon.events.CALL | mon.events.PY_START)
        return MONITORING_MECHANISM


    # -- the lean guard (an OS layer underneath) --------------------------------------------------------------------
    # A profile hook makes every Python call of the run several times slower (a loop of 1e6 calls: ~6x with an empty
    # hook, ~11x with the vetting; docs/benchmarks.md), and so do `sys.monitoring`'s CALL events in user code on
    # 3.12+ (a Python callback per call the cell makes: ~7x on the same loop). Where Landlock holds the worker, writes outside the run's
    # folders, programs and TCP are refused by the kernel whatever the cell does, so the guard keeps only what the OS
    # layer leaves to it, with no per-call work:
    # - the deny table's Python functions get a trampoline as their code (`_arm_functions`): the function object
    #   stays the same (references taken before, `map(np.save, ...)`, bound methods, subclasses all reach it), and
    #   each call is vetted by `_vet_entry` as the profile hook's `call` event would (writers redirected into the
    #   run's private copies, refusals with their labels); libraries imported later are armed at the next audit event
    #   after their import (before that, a writer's call meets the OS layer: `blocked`, never a write outside);
    # - the C functions the guard refuses to user code (`_c_label`: `os`'s non-reads, `signal`, `fcntl`, `termios`,
    #   `resource`, shared memory, `faulthandler`) are replaced in their modules and in the modules that re-export
    #   them (`os`, `signal`) by wrappers that refuse them when the caller is user code (`map(os.setsid, ...)` too:
    #   the caller is the cell's frame);
    # - `sys._getframe` from user code (the walk to CRANE's frames, P4) is refused through its audit event;
    # - what the audit hook refuses (sockets: UDP, path-named UNIX sockets; processes; signals; ctypes and gc walks
    #   from user code; sqlite's authorizer) and `shield_unaudited` (setpriority/sched_* on other processes, ...)
    #   stay as they are.
    # Not vetted here (the OS layer and the audit hook hold them): builtins (`exec`, `eval`, `compile` run code that
    # is itself user code under the same layers) and C functions user code took before the run (`from os import
    # setsid` in the kernel: the same object, not the wrapper).
    def _caller_is_user(self, depth: int) -> bool:
        self._busy = True
        try:
            f: types.FrameType | None = sys._getframe(depth)  # 0: this function
        except ValueError:
            return False
        finally:
            self._busy = False
        return f is not None and self.is_user(f.f_code)

    def code_of(self, fn: types.FunctionType) -> types.CodeType:
        """The code `fn` runs as its own (what it had before the lean guard gave it a trampoline)."""
        return self.originals.get(fn) or fn.__code__

    def arm(self) -> None:
        """Put the lean guard's replacements in place (once; inert until `install`)."""
        if self.armed:
            return
        self.armed = True
        self._arm_functions()
        self._arm_c_functions()
        sys.addaudithook(self._lean_audit)

    def _lean_audit(self, event: str, args: tuple) -> None:
        if not self.active or self._busy:
            return
        if self.dirty or len(sys.modules) != self.nmods or self.hot and self._hot_done():
            if event != "import":  # (the module is not run yet at its import event: armed at a later one)
                self.refresh()
        if event in ("sys._getframe", "sys._getframemodulename"):
            self._busy = True
            try:
                f: types.FrameType | None = sys._getframe(1)  # 0: this hook, 1: who called sys._getframe
            finally:
                self._busy = False
            entry = self.codes.get(f.f_code) if f is not None else None
            if entry is not None and f is not None and entry.scope == GUARD_USER:  # inspect.currentframe, stack
                back = f.f_back
                self._vet_entry(entry, {}, back.f_code if back is not None else None)
            elif f is not None and self.is_user(f.f_code):
                self._refuse(f"sys: {event}")

    def _arm_functions(self) -> None:
        todo, self.unarmed = self.unarmed, []
        for fn, entry in todo:
            if getattr(fn, "__crane_armed__", False):
                continue
            try:
                own = _own_function(fn)
                if own is None:
                    continue  # (a trampoline would shift the frames it reads: vetted at its sys._getframe instead)
                _give_trampoline(fn, self._checked_call(fn, entry, own))
                if self.provenance is not None:
                    self.provenance.accept(fn)
            except (TypeError, ValueError, AttributeError):
                continue  # a function whose code cannot be replaced: its calls meet the OS layer
            fn.__crane_armed__ = True

    def _checked_call(self, fn: Any, entry: _Entry, own: tuple) -> Callable:
        orig, sig = own  # (`_own_function`: the function's own code as a function of its own, its signature)
        self.originals[fn] = fn.__code__
        fn.__signature__ = sig  # what inspect says of the function stays its own (not the trampoline's)
        guard = self

        def call(*args: Any, **kwargs: Any) -> Any:
            if guard.active:
                try:
                    bound = sig.bind(*args, **kwargs)
                    bound.apply_defaults()
                except TypeError:
                    return orig(*args, **kwargs)  # the call's own TypeError
                loc = dict(bound.arguments)
                caller = None
                if entry.scope == GUARD_USER:
                    guard._busy = True
                    try:
                        caller = sys._getframe(2).f_code  # 0: this, 1: the trampoline (the function), 2: its caller
                    finally:
                        guard._busy = False
                if guard._vet_entry(entry, loc, caller, True):
                    bound.arguments.update(loc)  # (a path into the real working folder: its run-folder counterpart)
                    return orig(*bound.args, **bound.kwargs)
            return orig(*args, **kwargs)
        # its frame reads as the function's own in tracebacks and to `is_user` (a library's file)
        call.__code__ = call.__code__.replace(co_filename=fn.__code__.co_filename, co_name=fn.__code__.co_name,
                                              co_qualname=fn.__code__.co_qualname)
        return call

    def _arm_c_functions(self) -> None:
        wrapped: dict[int, Callable] = {}
        for modname in _LEAN_C_MODULES:
            try:
                mod = __import__(modname)
            except ImportError:
                continue
            for name, fn in list(mod.__dict__.items()):
                if not isinstance(fn, types.BuiltinFunctionType) or name.startswith("__"):
                    continue
                label = self._c_label(fn, mod) if name not in _LEAN_AUDITED else ""
                if label:
                    wrapped[id(fn)] = self._c_wrapper(fn, label)
        for modname in _LEAN_C_MODULES + _LEAN_C_EXPORTS:
            where = sys.modules.get(modname)
            if where is None:
                continue
            for name, fn in list(where.__dict__.items()):
                w = wrapped.get(id(fn))
                if w is not None and isinstance(fn, types.BuiltinFunctionType):
                    where.__dict__[name] = w

    def _c_wrapper(self, orig: Any, label: str) -> Callable:
        guard = self

        def call(*args: Any, **kwargs: Any) -> Any:
            if guard.active and guard._caller_is_user(2):  # 0: _caller_is_user, 1: this, 2: the caller
                guard._refuse(label)
            return orig(*args, **kwargs)
        return _named_as(call, orig, "")


def _named_as(call: Callable, orig: Any, module: str) -> Callable:
    """`call` (a wrapper of `orig`) with `orig`'s name, doc and module (`module` where it has none)."""
    call.__name__ = call.__qualname__ = getattr(orig, "__name__", "call")
    call.__doc__ = getattr(orig, "__doc__", None)
    call.__module__ = getattr(orig, "__module__", None) or module
    return call


LEAN_MECHANISM = "lean (trampolines and audit events; OS layer underneath)"
MONITORING_MECHANISM = "sys.monitoring"
# modules whose C functions `_c_label` refuses to user code, replaced by the lean guard; where they are re-exported
_LEAN_C_MODULES = ("posix", "nt", "_signal", "fcntl", "termios", "resource", "_posixshmem", "_multiprocessing",
                   "faulthandler")
_LEAN_C_EXPORTS = ("os", "signal")
# left to the audit hook, which refuses them to everyone but the one fork it lets through (multiprocessing's
# launcher for a start the guard vetted, found by the frames that called `os.fork`, which a wrapper would change)
_LEAN_AUDITED = frozenset(("fork", "forkpty"))
_MARK = "__crane_call__"


def _function_of(obj: Any) -> types.FunctionType | None:
    """The innermost Python function a table row names (the one whose code `_codes_of` gives)."""
    found, seen = None, 0
    while obj is not None and seen < 10:
        seen += 1
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        if isinstance(obj, types.FunctionType):
            found = obj
        obj = getattr(obj, "__wrapped__", None)
    return found


def _reads_frames(code: types.CodeType) -> bool:
    """The function reads its caller's frame (`inspect.currentframe`, `sys._getframe`): it keeps its own code."""
    return any(n in ("_getframe", "currentframe") for n in code.co_names)


# What arming a table function needs that does not depend on the run, made once in a warm head before it forks its
# runs (`prepare_trampolines`; worker/head.py) and inherited by each fork child: per function, its own code as a
# function of its own and that function's signature; per closure size, the trampoline's code (compiled once). A run
# only fills in its own `call` (a constant of the trampoline) and the function's name, file and line. An entry counts
# only while the function still has the code, defaults and keyword defaults it was made from (else made again).
_PREPARED: dict = {}  # function -> (code, defaults, kwdefaults, own function, signature), or None: reads frames
_TRAMPOLINES: dict[int, types.CodeType] = {}  # number of free variables -> the trampoline's code (`_MARK` constant)


def _make_own(fn: types.FunctionType) -> tuple | None:
    if _reads_frames(fn.__code__):
        return None
    orig = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    orig.__kwdefaults__ = fn.__kwdefaults__
    orig.__qualname__ = fn.__qualname__
    orig.__annotations__ = fn.__annotations__
    import inspect
    return orig, inspect.signature(orig)  # (a function it fails on is left as it is: ValueError, TypeError)


def _own_function(fn: types.FunctionType) -> tuple | None:
    """(`fn`'s own code as a function of its own, its signature), or None where `fn` reads its caller's frames."""
    code, defaults, kwdefaults = fn.__code__, fn.__defaults__, fn.__kwdefaults__
    if fn in _PREPARED:
        got = _PREPARED[fn]
        if got is None or (got[0] is code and got[1] is defaults and got[2] is kwdefaults):
            return None if got is None else (got[3], got[4])
    return _make_own(fn)


def prepare_trampolines() -> int:
    """In a warm head (never a run): prepare the lean guard's arming of every table function loaded now, and the
    trampolines' code for every closure size they have, so each fork child's `arm` only binds them (the run's own
    guard, armed per run as before). Returns how many functions were prepared now."""
    made = 0
    for fn, _ in CallGuard(lambda label: None).unarmed:  # (resolving the table imports nothing, installs nothing)
        if getattr(fn, "__crane_armed__", False):
            continue
        got = _PREPARED.get(fn, False)
        if got is None or (got is not False and got[0] is fn.__code__ and got[1] is fn.__defaults__
                           and got[2] is fn.__kwdefaults__):
            continue
        try:
            own = _make_own(fn)
            _trampoline_code(len(fn.__code__.co_freevars))
        except (TypeError, ValueError, AttributeError):
            continue
        _PREPARED[fn] = None if own is None else (fn.__code__, fn.__defaults__, fn.__kwdefaults__) + own
        made += 1
    return made


def _trampoline_code(n: int) -> types.CodeType:
    """The trampoline's code for a function with `n` free variables (compiled once per `n`): it calls the constant
    `_MARK` (replaced by the run's `call`) with its arguments."""
    code = _TRAMPOLINES.get(n)
    if code is not None:
        return code
    import warnings
    cells = [f"_crane_c{i}" for i in range(n)]
    src = "def _outer():\n"
    if cells:
        src += f"    {' = '.join(cells)} = None\n"
    src += "    def _t(*args, **kwargs):\n"
    if cells:
        src += f"        {', '.join(cells)}\n"
    src += f"        return {_MARK!r}(*args, **kwargs)\n    return _t\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outer = compile(src, "<crane-trampoline>", "exec")
    code = next(c for c in next(c for c in outer.co_consts if isinstance(c, types.CodeType)).co_consts
                if isinstance(c, types.CodeType))
    _TRAMPOLINES[n] = code
    return code


def _give_trampoline(fn: types.FunctionType, call: Callable) -> None:
    """Make `fn` run `call(*args, **kwargs)`: its code becomes a trampoline of the same name, file and line (as
    many free variables as its closure has cells, as CPython requires), with `call` as a constant."""
    code = _trampoline_code(len(fn.__code__.co_freevars))
    code = code.replace(co_consts=tuple(call if type(c) is str and c == _MARK else c for c in code.co_consts),
                        co_filename=fn.__code__.co_filename, co_name=fn.__code__.co_name,
                        co_qualname=fn.__code__.co_qualname, co_firstlineno=fn.__code__.co_firstlineno)
    fn.__code__ = code


# -- C functions with no audit event, replaced in their modules ------------------------------------------------------
# Calls that reach another process of the same user or make special files, and that CPython 3.11 audits not at all:
# whoever calls them (the cell directly, `map`/`itertools.starmap`/`functools.partial`, a pool thread, a library on
# the cell's behalf), the replacement decides on the arguments. What stays allowed is what touches only the worker
# itself (pid 0 or its own) or the run's folder.
_SELF_PID = {"setpriority": 1, "sched_setaffinity": 0, "sched_setscheduler": 0, "sched_setparam": 0,
             "pidfd_open": 0}
_IN_FOLDER = ("mkfifo", "mknod")
# libraries' C functions that act on a process named by its pid (their first argument) with no audit event: psutil's
# process controls (`Process.nice`/`cpu_affinity`/`ionice`/`rlimit` call them; the cell can call them directly, or
# through `map`). Replaced in their extension module once it is loaded (at set-up, else when the guard resolves the
# libraries imported since: `CallGuard.after_import`), refused unless the pid is this process (round 6, P2)
_LIBRARY_PID = {"psutil._psutil_linux": ("proc_cpu_affinity_set", "proc_ioprio_set", "proc_priority_set",
                                         "linux_prlimit"),
                "psutil._psutil_posix": ("setpriority",), "psutil._psutil_osx": ("proc_priority_set",),
                "psutil._psutil_bsd": ("proc_cpu_affinity_set", "proc_priority_set"),
                "psutil._psutil_windows": ("proc_priority_set", "proc_io_priority_set", "proc_cpu_affinity_set",
                                           "proc_suspend_or_resume", "proc_kill")}
_ALWAYS = {"signal": ("pidfd_send_signal",), "_posixsubprocess": ("fork_exec",),
           "_thread": ("start_new_thread", "start_new"), "gc": ("get_objects", "get_referrers", "get_referents")}


# `os.open(..., dir_fd=fd)`: its audit event names the path alone, not the folder it is relative to (round 6, P1: a
# descriptor of a folder outside, opened for reading, and a relative name "inside" wrote there). A write-open relative
# to a folder descriptor goes on only where that folder (the descriptor's path, /proc/self/fd) holds the name inside
# the run's folder; elsewhere, or where the path cannot be read, it is refused.
_OPEN_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _fd_path(fd: int) -> str:
    """The path of an open folder descriptor: fcntl's F_GETPATH on macOS and the BSDs, Linux's descriptor links
    elsewhere (OSError where neither can tell: the write is then refused)."""
    import fcntl
    getpath = getattr(fcntl, "F_GETPATH", None)
    if getpath is not None:
        return os.fsdecode(fcntl.fcntl(fd, getpath, bytes(1024)).rstrip(b"\0"))
    return os.readlink(f"/proc/self/fd/{fd}")  # (Linux)


def _at_folder(dir_fd: Any, path: Any) -> str | None:
    """The path `path` names relative to the folder descriptor `dir_fd` (None where it cannot be told)."""
    try:
        name = os.fsdecode(path)
        if os.path.isabs(name):
            return name
        return os.path.join(_fd_path(int(dir_fd)), name)
    except (OSError, TypeError, ValueError, ImportError):
        return None


# -- other processes' entries of the process file system (round 7, the guard alone) ---------------------------------
# `/proc/<kernel pid>/mem` written (the kernel's memory), its `fd/N` reopened (its sockets, its connection file),
# its `environ`, `maps`, `cwd`, `root`: a path the cell opens is checked on its text and on where it resolves (any
# spelling: `/proc/self/../PID`, a thread's folder, a link to it, a folder descriptor of `/proc/PID`), with this
# module's own realpath (C functions bound at import: `os.path`/`os.lstat` are the cell's to replace). The worker
# itself opens nothing there. Another process's status files stay readable (psutil's reads: `stat`, `status`, ...).
_PROCFS = "proc"  # the first component of the process file system's paths (Linux; elsewhere no path has it)
_PROC_GETPID = sys.modules[os.name].getpid  # (bound now: the cell may replace `os.getpid`, `os.path.normpath`)
_PROC_NORMPATH = os.path.normpath
_PROC_READABLE = frozenset((
    "stat", "status", "statm", "cmdline", "comm", "io", "limits", "cgroup", "oom_score", "oom_score_adj", "sched",
    "schedstat", "wchan", "loginuid", "sessionid", "cpuset", "num_threads"))


def _proc_entry(text: str) -> tuple[int, list[str]] | None:
    """(pid, the components below its folder) where `text` (absolute, normalized) is in a process's folder."""
    parts = text.split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] != _PROCFS or not parts[2].isdigit():
        return None
    return int(parts[2]), [p for p in parts[3:] if p]


def _own_task(pid: int) -> bool:
    """`pid` is this process or one of its threads (a thread's id also names a folder of the process file system)."""
    own = _PROC_GETPID()
    if pid == own:
        return True
    try:
        return _LB_LSTAT is not None and _LB_LSTAT(f"/{_PROCFS}/{own}/task/{pid}") is not None
    except OSError:
        return False


def other_process_entry(path: Any, write: bool) -> str | None:
    """The entry of another process's folder in the process file system that opening `path` would reach and the run
    may not open (`write`: for writing: none; for reading: only `_PROC_READABLE`), or None."""
    if os.sep != "/" or isinstance(path, int) or not sys.platform.startswith("linux"):
        return None
    try:
        text = os.fsdecode(os.fspath(path))
        if not text.startswith("/"):
            text = _LB_GETCWD() + "/" + text
    except (TypeError, ValueError, OSError):
        return None
    head, _, leaf = text.rstrip("/").rpartition("/")
    spellings = [text]
    for resolve in (lambda: _lb_realpath(text), lambda: _lb_realpath(head or "/") + "/" + leaf):
        try:
            spellings.append(resolve())
        except (TypeError, ValueError, OSError):
            continue  # (what cannot be resolved is judged on the other spellings)
    for spelled in spellings:
        spelled = "/" + _PROC_NORMPATH(spelled).lstrip("/")
        found = _proc_entry(spelled)
        if found is None or _own_task(found[0]):
            continue
        rest = found[1]
        if len(rest) >= 2 and rest[0] == "task" and rest[1].isdigit():
            rest = rest[2:]  # a thread of that process: the same entries
        if write or len(rest) != 1 or rest[0] not in _PROC_READABLE:
            return spelled
    return None


def _own(pid: Any) -> bool:
    return type(pid) is int and pid in (0, os.getpid())


def shield_unaudited(guard: CallGuard, is_own: Callable[[], bool] = lambda: False) -> list[str]:
    """Replace the unaudited process and special-file calls (`_SELF_PID`, `_IN_FOLDER`, `_ALWAYS`, `_LIBRARY_PID`,
    `os.open` relative to a folder descriptor) in their modules
    by functions that refuse them (through `guard.on_refuse`) unless they touch only this process or the run's
    folder; `is_own()`: CRANE's own operation in progress (never refused). Returns what was replaced."""
    import functools
    done: list[str] = []

    def put(mod: Any, name: str, wrapper: Callable) -> None:
        orig = mod.__dict__.get(name)
        if orig is None or getattr(orig, "__crane_shield__", False):
            return
        w = functools.wraps(orig)(wrapper(orig))
        del w.__wrapped__  # (the original is not handed to the cell by name)
        setattr(w, "__crane_shield__", True)  # noqa: B010
        mod.__dict__[name] = w
        done.append(f"{mod.__name__}.{name}")

    def self_only(name: str, argi: int) -> Callable:
        def make(orig: Callable) -> Callable:
            def call(*args: Any, **kw: Any) -> Any:
                target = args[argi] if len(args) > argi else kw.get("who" if name == "setpriority" else "pid")
                if name == "setpriority" and (args[0] if args else kw.get("which")) != getattr(os, "PRIO_PROCESS", 0):
                    target = None  # a process group or a user: other processes
                if not is_own() and not _own(target):
                    what = f"{name.split('.')[0]}: {name}" if "." in name else f"os: posix.{name}"
                    guard._refuse(f"{what} on another process ({target!r})")
                return orig(*args, **kw)
            return call
        return make

    def in_folder(name: str) -> Callable:
        def make(orig: Callable) -> Callable:
            def call(path: Any, *args: Any, **kw: Any) -> Any:
                if not is_own():
                    if kw.get("dir_fd") is not None or not guard.inside(path):
                        guard._refuse(f"os: posix.{name} outside the cell's working folder ({str(path)[:200]!r})")
                    guard.prepare(path)
                return orig(path, *args, **kw)
            return call
        return make

    def at_folder(name: str) -> Callable:
        def make(orig: Callable) -> Callable:
            def call(*args: Any, **kw: Any) -> Any:
                dir_fd = kw.get("dir_fd")
                flags = args[1] if len(args) > 1 else kw.get("flags")
                if dir_fd is not None and not is_own():  # another process's entry, through its folder's descriptor
                    at = _at_folder(dir_fd, args[0] if args else kw.get("path"))
                    entry = other_process_entry(at, type(flags) is not int or bool(flags & _OPEN_WRITES)) if at else None
                    if entry is not None:
                        guard._refuse(f"os: posix.{name} of another process's {entry!r}")
                if dir_fd is not None and not is_own() and (type(flags) is not int or flags & _OPEN_WRITES):
                    path = args[0] if args else kw.get("path")
                    at = _at_folder(dir_fd, path)
                    if at is None or not guard.inside(at):
                        guard._refuse(f"os: posix.{name} for writing relative to a folder descriptor "
                                      f"({str(at or path)[:200]!r})")
                    guard.prepare(at)
                return orig(*args, **kw)
            return call
        return make

    def never(label: str) -> Callable:
        def make(orig: Callable) -> Callable:
            def call(*args: Any, **kw: Any) -> Any:
                if not is_own() and not guard.leeway(label):
                    guard._refuse(label)
                return orig(*args, **kw)
            return call
        return make

    for modname in ("posix", "os", "nt"):
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for name, argi in _SELF_PID.items():
            put(mod, name, self_only(name, argi))
        for name in _IN_FOLDER:
            put(mod, name, in_folder(name))
        put(mod, "open", at_folder("open"))
    for modname, names in _ALWAYS.items():
        try:
            mod = __import__(modname)  # built-in modules: one instance, loaded now if not yet
        except ImportError:
            continue
        for name in names:
            put(mod, name, never(f"{_FAMILY.get(modname, modname)}: {modname}.{name}"))

    def libraries() -> None:
        for modname, names in _LIBRARY_PID.items():
            mod = sys.modules.get(modname)
            if type(mod) is not types.ModuleType:
                continue
            for name in names:
                if isinstance(mod.__dict__.get(name), types.BuiltinFunctionType):
                    put(mod, name, self_only(f"{modname}.{name}", 0))
    libraries()
    guard.after_import.append(libraries)
    if not guard.lean:  # (under an OS layer the writes and processes they could reach are the OS's to refuse)
        done += guard_combinators(guard)
        done += vet_c_methods(guard)
        guard._arm_c_functions()  # (round 8: a refused C function handed to any C caller meets its wrapper)
    return done


# -- C code that calls what it is handed (round 7) -------------------------------------------------------------------
# `map(sqlite3.Connection.set_authorizer, [con], [None])`: `map`'s `__next__` calls the C method from C, where no call
# hook sees it (neither the profile hook's `c_call` nor `sys.monitoring`'s CALL: both see calls made by bytecode).
# The builtins and standard modules that call a callable they are handed are replaced, for the run, by versions that
# vet that callable when user code hands it (`CallGuard.vet_handed`: refused as the cell's own call would be): the
# types by subclasses that objects the originals made still pass `isinstance` for (`_HandedMeta`), the functions by
# wrappers. C functions of modules refused to user code are also caught where they run (the lean guard's wrappers,
# `shield_unaudited`); this covers the C methods of C types (immutable: they cannot be replaced).
class _HandedMeta(type):
    """The metaclass of a replacement subclass (`__crane_base__`: the type it replaces): what the original type
    made is still an instance (arrow.py's `FileSystem` too)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        base = cls.__dict__.get("__crane_base__")  # (a class the cell or a library derives from it: the usual check)
        return isinstance(obj, base) if base is not None else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub: Any) -> bool:
        base = cls.__dict__.get("__crane_base__")
        return issubclass(sub, base) if base is not None else type.__subclasscheck__(cls, sub)


def _first(args: tuple, kw: dict) -> tuple:
    return args[:1]


def _key(args: tuple, kw: dict) -> tuple:
    return (kw["key"],) if "key" in kw else ()


# (module, name, the handed callables of a call, is a type)
_COMBINATORS: tuple = (
    ("builtins", "map", _first, True), ("builtins", "filter", _first, True),
    ("builtins", "sorted", _key, False), ("builtins", "min", _key, False), ("builtins", "max", _key, False),
    ("builtins", "iter", lambda a, k: a[:1] if len(a) == 2 else (), False),
    ("functools", "partial", _first, True), ("functools", "reduce", _first, False),
    ("itertools", "starmap", _first, True), ("itertools", "filterfalse", _first, True),
    ("itertools", "takewhile", _first, True), ("itertools", "dropwhile", _first, True),
    ("itertools", "groupby", lambda a, k: a[1:2] + ((k["key"],) if "key" in k else ()), True),
    ("itertools", "accumulate", lambda a, k: a[1:2] + ((k["func"],) if "func" in k else ()), True),
    ("atexit", "register", _first, False), ("functools", "cmp_to_key", _first, False),
) + tuple(("bisect", n, _key, False) for n in ("bisect", "bisect_left", "bisect_right", "insort", "insort_left",
                                                "insort_right"))
_COMBINATORS_DONE: dict = {}  # (module, name) -> (original, replacement)


def _handed_type(guard: CallGuard, base: type, picks: Callable) -> type:
    def __new__(cls: type, *args: Any, **kw: Any) -> Any:
        handed = picks(args, kw)
        if handed and guard.active and guard._caller_is_user(2):  # 0: that, 1: this, 2: who made the object
            for fn in handed:
                guard.vet_handed(fn)
        return base.__new__(cls, *args, **kw)
    ns = {"__new__": __new__, "__module__": base.__module__, "__qualname__": base.__qualname__,
          "__doc__": base.__doc__, "__crane_base__": base, "__slots__": ()}
    new = _HandedMeta(base.__name__, (base,), ns)
    # an object the original type made (before the run, or by C code) pickles and copies by the replacement, which
    # its module's name now gives (pickle checks the name leads back to the very type it saves)
    reduce: Callable[[Any], Any] = getattr(base, "__reduce__")  # noqa: B009 - the unbound method (typed: one argument)
    copyreg.pickle(base, lambda obj: (new, *reduce(obj)[1:]))
    return new


def _handed_function(guard: CallGuard, orig: Callable, picks: Callable) -> Callable:
    def call(*args: Any, **kw: Any) -> Any:
        handed = picks(args, kw)
        if handed and guard.active and guard._caller_is_user(2):
            for fn in handed:
                guard.vet_handed(fn)
        return orig(*args, **kw)
    return _named_as(call, orig, "builtins")


def _methodcaller(guard: CallGuard, orig: Callable) -> Callable:
    def methodcaller(name: Any, /, *args: Any, **kw: Any) -> Any:
        if type(name) is str and name in _C_METHOD_NAMES and guard.active and guard._caller_is_user(2):
            guard._refuse(f"operator: methodcaller({name!r}) (a C method the cell may not call)")
        return orig(name, *args, **kw)
    methodcaller.__doc__ = getattr(orig, "__doc__", None)
    methodcaller.__module__ = "operator"
    return methodcaller


def guard_combinators(guard: CallGuard) -> list[str]:
    """Replace `_COMBINATORS` and `operator.methodcaller` in their modules (and the C modules they come from) for
    this process's runs; returns what was replaced."""
    done: list[str] = []
    for modname, name, picks, is_type in _COMBINATORS + (("operator", "methodcaller", None, False),):
        try:
            mod = __import__(modname)
        except ImportError:
            continue
        orig = mod.__dict__.get(name)
        if orig is None or (modname, name) in _COMBINATORS_DONE:
            continue
        if picks is None:
            new = _methodcaller(guard, orig)
        elif is_type:
            new = _handed_type(guard, orig, picks)
        else:
            new = _handed_function(guard, orig, picks)
        _COMBINATORS_DONE[(modname, name)] = (orig, new)
        for where in (modname, "_" + modname):
            m = sys.modules.get(where)
            if type(m) is types.ModuleType and m.__dict__.get(name) is orig:
                m.__dict__[name] = new
        done.append(f"{modname}.{name}")
    return done


# -- C methods vetted where they are defined (round 8) -------------------------------------------------------------
# A C method the guard refuses (`_C_METHODS`) can be handed to any C code that calls what it is given — `list.sort
# (key=)`, `collections.defaultdict`'s factory, a `property`, `weakref`'s callbacks, `functools.lru_cache`, `copyreg`,
# a C extension's own `sorted` — and, on 3.12+ (no argument scan), to library code: no list of callers is complete.
# The general rule: where no OS layer runs, such a method is replaced in its type's own dict (behind the read-only
# mappingproxy, as worker/frames.py does for the frame type; `PyType_Modified` drops the lookup caches) by a Python
# function that vets the call itself, however the method was reached (`obj.m`, `type(obj).m`, `__mro__`, a
# subclass, a bound method handed on) and whoever calls it: no original is left in the type for the cell to find.
# A writer is vetted on its path as the guard table's writers are (`_vet_entry`); `set_authorizer` is refused to
# anything but CRANE's own code (its authorizer on every connection, worker/portable.py). pyarrow's file systems are
# done the same way by worker/arrow.py.
_GD_REFERENTS = gc.get_referents  # (bound at import: the run's `gc` functions are the shield's)
_GD_MODIFIED: list = []  # ctypes.pythonapi.PyType_Modified, bound at the first replacement (before the cell)


def _gd_type_dict(t: type) -> dict:
    """The type's own attribute dict (behind its read-only mappingproxy)."""
    return next(r for r in _GD_REFERENTS(type.__dict__["__dict__"].__get__(t)) if isinstance(r, dict))


def replace_type_method(t: type, name: str, make: Callable[[Any], Any]) -> bool:
    """Put `make(original)` in type `t`'s own dict as `name` (once; an immutable C type too); False where `t` has no
    such attribute of its own or it was done already."""
    d = _gd_type_dict(t)
    orig = d.get(name)
    if orig is None or getattr(orig, "__crane_vetted__", False):
        return False
    if not _GD_MODIFIED:
        import ctypes
        modified = ctypes.pythonapi.PyType_Modified
        modified.argtypes = [ctypes.py_object]
        _GD_MODIFIED.append(modified)
    new = make(orig)
    new.__crane_vetted__ = True
    d[name] = new
    _GD_MODIFIED[0](t)
    return True


def _called_by(depth: int, name: str) -> bool:
    """The frame `depth` levels up (0: this function's caller) runs CRANE's own function `name` itself (not any of
    CRANE's code: a CRANE wrapper the cell calls — `functools.reduce`'s — may call the method on the cell's behalf)."""
    try:
        f = sys._getframe(depth + 1)
    except ValueError:
        return False
    return f.f_code.co_name == name and _crane_code(f.f_code)


def _refused_but_to(name: str) -> Callable[[CallGuard, str], Callable[[Any], Callable]]:
    """Refused to every caller but CRANE's function `name` (worker/portable.py's `authorize`, which puts CRANE's
    authorizer on every connection: were it renamed, every connection would be refused, never let through)."""
    def vetting(guard: CallGuard, label: str) -> Callable[[Any], Callable]:
        def make(orig: Any) -> Callable:
            def call(self: Any, *args: Any, **kw: Any) -> Any:
                if guard.active and not _called_by(1, name):  # 0: `_called_by`'s caller (this), 1: the method's
                    guard._refuse(label)
                return orig(self, *args, **kw)
            return _named_as(call, orig, "")
        return make
    return vetting


def _path_writer(guard: CallGuard, label: str, arg: str) -> Callable[[Any], Callable]:
    entry = _Entry(label, (arg,), GUARD_ANY, None)

    def make(orig: Any) -> Callable:
        def call(self: Any, *args: Any, **kw: Any) -> Any:
            if guard.active:
                loc = {arg: args[0] if args else kw.get(arg)}
                if guard._vet_entry(entry, loc, None, True):
                    args, kw = ((loc[arg],) + args[1:], kw) if args else (args, {**kw, arg: loc[arg]})
            return orig(self, *args, **kw)
        return _named_as(call, orig, "")
    return make


# (module, type) -> {method: the vetting made for it}
_VETTED_METHODS: dict[tuple[str, str], dict[str, Callable[[CallGuard, str], Callable[[Any], Callable]]]] = {
    ("sqlite3", "Connection"): {"set_authorizer": _refused_but_to("authorize")},
    ("numpy", "ndarray"): {"tofile": lambda g, label: _path_writer(g, label, "fid")},
}


def vet_c_methods(guard: CallGuard) -> list[str]:
    """Replace `_VETTED_METHODS` in their types (those loaded now, and later ones when the guard resolves the
    libraries imported since: `CallGuard.after_import`); returns what was replaced now."""
    done: list[str] = []

    def types_loaded() -> None:
        for (modname, typename), methods in _VETTED_METHODS.items():
            mod = sys.modules.get(modname)
            t = mod.__dict__.get(typename) if type(mod) is types.ModuleType else None
            if not isinstance(t, type):
                continue
            for name, vetting in methods.items():
                label = f"{_FAMILY.get(modname, modname)}: {typename}.{name}"
                if replace_type_method(t, name, vetting(guard, label)):
                    done.append(f"{modname}.{typename}.{name}")
    types_loaded()
    guard.after_import.append(types_loaded)
    return done


# -- a C type's construction vetted in the type itself (round 9) -----------------------------------------------------
# A Cython class that opens a file when it is made (pyarrow's `OSFile` in a writing mode: `CompressedOutputStream`,
# `CSVWriter`, the IPC and Feather writers and `pa.output_stream` all make one from a path) opens it in its C
# `tp_new`, which `type.__call__` reaches through the class's C slots, never through its dict: a Python subclass in
# the module (worker/arrow.py) leaves the original one `__mro__[1]` away, and pyarrow's own Cython code makes the
# original directly. So the class itself is changed: its `tp_new` slot becomes CPython's generic slot (the one every
# Python class with a `__new__` has: it calls the `__new__` found on the type), its vectorcall shortcut is cleared (so
# a call goes through `tp_new`), and its dict's `__new__` is a Python function that vets the call and then calls the
# original C `tp_new` (kept only as a ctypes function pointer). Every way to make one — the class reached through any
# module, `__mro__`, `__class__`, a subclass, pyarrow's own C calls — meets the vetting. Only where the type object's
# layout is the one checked here (CPython 3.11-3.13, GIL build: `tp_flags`/`tp_base` found where expected).
_TN_WORD = 8  # (pointer size: checked against ctypes below)
_TN_FLAGS, _TN_BASE, _TN_NEW, _TN_VECTORCALL = 21, 32, 39, 50  # indexes of PyTypeObject's fields, in words


class _TnProbeA:
    def __new__(cls) -> Any:  # (two Python classes with `__new__`: their tp_new is CPython's slot_tp_new)
        return object.__new__(cls)


class _TnProbeB:
    def __new__(cls) -> Any:
        return object.__new__(cls)


def _tn_slots(t: type) -> Any:
    """The ctypes module and a reader of `t`'s type-object words, where its layout is the one expected; else None."""
    import ctypes
    if ctypes.sizeof(ctypes.c_void_p) != _TN_WORD or not (3, 11) <= sys.version_info[:2] <= (3, 13) \
            or "t" in getattr(sys, "abiflags", ""):
        return None

    def word(obj: type, i: int) -> Any:
        return ctypes.c_void_p.from_address(id(obj) + i * _TN_WORD)
    base = type.__dict__["__base__"].__get__(t)
    flags = type.__dict__["__flags__"].__get__(t)
    if (word(t, _TN_FLAGS).value or 0) != flags or word(t, _TN_BASE).value != id(base) \
            or word(_TnProbeA, _TN_NEW).value != word(_TnProbeB, _TN_NEW).value \
            or word(_TnProbeA, _TN_VECTORCALL).value is not None:
        return None
    return ctypes, word


def replace_type_new(t: type, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Make every construction of C type `t` (whatever reached it) run `make(original)(cls, *args, **kw)`, where
    `original(cls, *args, **kw)` makes the object as `t`'s own C `tp_new` does (once; False where the type's layout
    is not the one expected, or `t` has no `__new__` of its own)."""
    d = _gd_type_dict(t)
    if "__new__" not in d or getattr(d["__new__"], "__crane_vetted__", False):
        return False
    got = _tn_slots(t)
    if got is None:
        return False
    ctypes, word = got
    new_slot = word(t, _TN_NEW)
    c_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.c_void_p)(new_slot.value)

    def original(cls: type, *args: Any, **kw: Any) -> Any:
        return c_new(cls, args, id(kw) if kw else None)  # (kwds: NULL where there are none, as CPython passes)
    vetted = make(original)
    vetted.__crane_vetted__ = True  # type: ignore[attr-defined]
    if not _GD_MODIFIED:
        modified = ctypes.pythonapi.PyType_Modified
        modified.argtypes = [ctypes.py_object]
        _GD_MODIFIED.append(modified)
    held = staticmethod(vetted)
    held.__crane_vetted__ = True  # type: ignore[attr-defined]
    d["__new__"] = held
    original_new, generic = new_slot.value, word(_TnProbeA, _TN_NEW).value
    todo, seen = [t], set()
    while todo:  # (subclasses made before, which copied the C `tp_new`, find the vetting `__new__` through the MRO)
        k = todo.pop()
        if id(k) in seen:
            continue
        seen.add(id(k))
        if k is t or word(k, _TN_NEW).value == original_new and _tn_slots(k) is not None:
            word(k, _TN_NEW).value = generic
            word(k, _TN_VECTORCALL).value = None
            _GD_MODIFIED[0](k)
        todo.extend(type.__dict__["__subclasses__"](k))
    return True


# CRANE's own makers of code objects that name a library's file (a trampoline takes its function's name and file:
# worker/imports.CodeProvenance believes them)
_CODE_MAKERS = (_give_trampoline.__code__, CallGuard._checked_call.__code__)


def makes_own_code(code: types.CodeType) -> bool:
    return any(code is c for c in _CODE_MAKERS)

