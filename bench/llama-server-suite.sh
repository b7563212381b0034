#!/usr/bin/env bash
# Runs llama.cpp's own server test suite (pytest, tools/server/tests of llama.cpp's source) against
# `tandem serve`, and prints a per-file table of passed / failed / errors / skipped.
#
# usage: bash bench/llama-server-suite.sh [pytest args...]
#        (default: unit/, i.e. every test file; paths are relative to llama.cpp's tools/server/tests)
#        bash bench/llama-server-suite.sh --suite-help      this text
#
# What it does (everything it creates lives under $TANDEM_SUITE_DIR, never inside this repository):
#   1. checks the Python modules the suite needs (Debian python3; missing ones are installed with apt-get
#      when running as root, unless TANDEM_SUITE_NO_APT=1); the `openai` package is not in Debian: see 3.
#   2. gets llama.cpp's source: $LLAMACPP_SRC if it holds tools/server/tests, else
#      `npm pack node-llama-cpp@3.22.1` and `git clone package/llama/gitRelease.bundle` (kept in the suite dir);
#      then copies tools/server/tests, models/templates and tools/mtmd (the tests use ../../../models/templates
#      and ../../../tools) to a fresh $TANDEM_SUITE_DIR/work.
#   3. openai: used if importable; otherwise from a source tree of github.com/openai/openai-python
#      ($TANDEM_SUITE_OPENAI_SRC: a checkout / git dir of that repository, or a folder holding openai/); a git
#      repository is read at tag $TANDEM_SUITE_OPENAI_REF (v2.14.0, what the suite's requirements.txt pins).
#      Debian 12's typing_extensions (4.4) lacks a few names openai uses (List, deprecated, TypeIs,
#      TypeAliasType) and Debian has no jiter (openai imports it only for partial-JSON parsing in the
#      `.stream()` helper, which the suite never calls): small shims for both are generated when needed.
#      If openai still cannot be imported, the files importing it fail at collection ("needs openai").
#   4. writes the "server binary" the suite runs (LLAMA_SERVER_BIN_PATH): a wrapper that prepends `serve` and
#      maps only the model download flags: `--hf-repo R --hf-file F` -> `-m $SHARED/models/F` (or its basename)
#      and `--hf-repo org/test-model-NAME` (no --hf-file) -> `-m $SHARED/models/NAME.gguf`, when that file
#      exists; anything else is passed through unchanged, so refused flags show up as failures.
#      TANDEM_SUITE_MODE=lenient (not the default) instead drops, one by one, each flag tandem refuses (found
#      by a parse-only try with a non-existent model) so the HTTP side can be measured; every drop is logged.
#   5. disables ServerPreset.load_all (the session-wide pre-download of every preset model: nothing can be
#      downloaded here, and one preset failing there would error every test); each test starts its own server.
#   6. runs pytest with one worker, a per-test timeout (pytest-timeout, $TANDEM_SUITE_TIMEOUT s) when it is
#      installed, saves the full output, and prints the table, the most common failure messages and a census
#      of the flags the suite passed (which ones `tandem serve` refuses).
#
# Environment: TANDEM_BIN (default <repo>/build/bin/tandem), TANDEM_SHARED_DIR (<repo>/../shared),
#   TANDEM_SUITE_DIR (/tmp/tandem-llama-suite), LLAMACPP_SRC (/work/llamacpp/src), TANDEM_SUITE_PYTHON
#   (/usr/bin/python3), TANDEM_SUITE_MODE (strict|lenient), TANDEM_SUITE_TIMEOUT (180), TANDEM_SUITE_PORT
#   (a free port), TANDEM_SUITE_OPENAI_SRC, TANDEM_SUITE_OPENAI_REF (v2.14.0), TANDEM_SUITE_NO_APT, SLOW_TESTS
#   (the suite's own switch; slow tests skip themselves unless SLOW_TESTS=1).
# Results: $TANDEM_SUITE_DIR/results-$MODE/ (pytest-output.txt, junit.xml, launches.jsonl, table.txt, ...).
set -euo pipefail

die() { echo "llama-server-suite: error: $*" >&2; exit 2; }
note() { echo "llama-server-suite: $*" >&2; }

if [[ "${1:-}" == "--suite-help" ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TANDEM_BIN=${TANDEM_BIN:-$REPO/build/bin/tandem}
SHARED=${TANDEM_SHARED_DIR:-$REPO/../shared}
SUITE_DIR=${TANDEM_SUITE_DIR:-/tmp/tandem-llama-suite}
LLAMACPP_SRC=${LLAMACPP_SRC:-/work/llamacpp/src}
NODE_LLAMA_CPP=node-llama-cpp@3.22.1
PY=${TANDEM_SUITE_PYTHON:-/usr/bin/python3}
MODE=${TANDEM_SUITE_MODE:-strict}
TIMEOUT=${TANDEM_SUITE_TIMEOUT:-180}
OPENAI_REF=${TANDEM_SUITE_OPENAI_REF:-v2.14.0}

# ---------------------------------------------------------------- sanity checks
[[ "$MODE" == strict || "$MODE" == lenient ]] || die "TANDEM_SUITE_MODE must be strict or lenient (got '$MODE')"
[[ -x "$TANDEM_BIN" ]] || die "tandem binary not found or not executable: $TANDEM_BIN (set TANDEM_BIN)"
TANDEM_BIN=$(cd "$(dirname "$TANDEM_BIN")" && pwd)/$(basename "$TANDEM_BIN")
[[ -x "$PY" ]] || die "python not found: $PY (set TANDEM_SUITE_PYTHON; Debian's /usr/bin/python3 sees the apt packages)"
mkdir -p "$SUITE_DIR"
SUITE_DIR=$(cd "$SUITE_DIR" && pwd -P)
case "$SUITE_DIR/" in
    "$(cd "$REPO" && pwd -P)/"*) die "TANDEM_SUITE_DIR ($SUITE_DIR) is inside the repository; choose a folder outside it" ;;
esac
if [[ -d "$SHARED/models" ]]; then
    SHARED=$(cd "$SHARED" && pwd -P)
    [[ -f "$SHARED/models/stories260K.gguf" ]] || note "warning: $SHARED/models/stories260K.gguf is missing; most tests need it"
else
    note "warning: $SHARED/models does not exist (set TANDEM_SHARED_DIR); no model can be mapped"
fi
command -v git >/dev/null || die "git is needed"

RESULTS=$SUITE_DIR/results-$MODE
PYDIR=$SUITE_DIR/py            # plugin + shims (+ openai source when extracted)
mkdir -p "$RESULTS" "$PYDIR" "$SUITE_DIR/bin"

# ---------------------------------------------------------------- 1. Python modules (Debian packages)
declare -A PKG=([pytest]=python3-pytest [requests]=python3-requests [aiohttp]=python3-aiohttp [numpy]=python3-numpy
    [filelock]=python3-filelock [prometheus_client]=python3-prometheus-client [wget]=python3-wget
    [xdist]=python3-pytest-xdist [pytest_timeout]=python3-pytest-timeout
    [pydantic]=python3-pydantic [httpx]=python3-httpx [anyio]=python3-anyio [distro]=python3-distro
    [sniffio]=python3-sniffio [typing_extensions]=python3-typing-extensions)
REQUIRED="pytest requests filelock wget"   # imported by conftest.py / utils.py: nothing runs without them
missing_mods() { local m out=""; for m in "${!PKG[@]}"; do "$PY" -c "import $m" 2>/dev/null || out+="$m "; done; echo "$out"; }
missing=$(missing_mods)
if [[ -n "$missing" ]]; then
    pkgs=""; for m in $missing; do pkgs+="${PKG[$m]} "; done
    if [[ "${TANDEM_SUITE_NO_APT:-0}" != 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        note "installing Debian packages: $pkgs"
        for p in $pkgs; do   # one by one: a package a release lacks must not block the others
            if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >/dev/null 2>&1; then
                [[ -n "${APT_UPDATED:-}" ]] || { apt-get update -q >/dev/null 2>&1 || true; APT_UPDATED=1; }
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$p" >/dev/null 2>&1 || note "warning: apt-get could not install $p"
            fi
        done
        missing=$(missing_mods)
    else
        note "missing Python modules: $missing(install: apt-get install $pkgs)"
    fi
fi
for m in $REQUIRED; do
    [[ " $missing " != *" $m "* ]] || die "Python module '$m' is required (Debian package ${PKG[$m]})"
done
[[ -z "$missing" ]] || note "warning: still missing Python modules: $missing(tests using them will fail)"

# ---------------------------------------------------------------- 2. llama.cpp source
if [[ -f "$LLAMACPP_SRC/tools/server/tests/utils.py" ]]; then
    SRC=$(cd "$LLAMACPP_SRC" && pwd -P)
elif [[ -f "$SUITE_DIR/src/llama.cpp/tools/server/tests/utils.py" ]]; then
    SRC=$SUITE_DIR/src/llama.cpp
else
    note "no llama.cpp source at $LLAMACPP_SRC; getting it from npm ($NODE_LLAMA_CPP)"
    command -v npm >/dev/null || die "npm is needed to get llama.cpp's source (or set LLAMACPP_SRC)"
    rm -rf "$SUITE_DIR/npm" "$SUITE_DIR/src"
    mkdir -p "$SUITE_DIR/npm" "$SUITE_DIR/src"
    (cd "$SUITE_DIR/npm" && npm pack --silent "$NODE_LLAMA_CPP" >/dev/null) || die "npm pack $NODE_LLAMA_CPP failed"
    tgz=$(ls "$SUITE_DIR"/npm/node-llama-cpp-*.tgz 2>/dev/null | head -1)
    [[ -n "$tgz" ]] || die "npm pack produced no tarball"
    tar -xzf "$tgz" -C "$SUITE_DIR/npm" package/llama/gitRelease.bundle || die "$tgz has no package/llama/gitRelease.bundle"
    git -c advice.detachedHead=false clone -q "$SUITE_DIR/npm/package/llama/gitRelease.bundle" "$SUITE_DIR/src/llama.cpp" || die "git clone of the bundle failed"
    [[ -f "$SUITE_DIR/src/llama.cpp/tools/server/tests/utils.py" ]] || die "the bundle's source has no tools/server/tests"
    SRC=$SUITE_DIR/src/llama.cpp
fi
SRC_REV=$(git -C "$SRC" log -1 --format='%h %cd' --date=short 2>/dev/null || echo "unknown revision")
note "llama.cpp source: $SRC ($SRC_REV)"

WORK=$SUITE_DIR/work
rm -rf "$WORK"
mkdir -p "$WORK/tools/server" "$WORK/models"
cp -R "$SRC/tools/server/tests" "$WORK/tools/server/tests"
rm -rf "$WORK/tools/server/tests/tmp"
mkdir -p "$WORK/tools/server/tests/tmp"   # the suite's TMP_DIR (normally created by its model downloads)
[[ -d "$SRC/models/templates" ]] && cp -R "$SRC/models/templates" "$WORK/models/templates"
[[ -d "$SRC/tools/mtmd" ]] && cp -R "$SRC/tools/mtmd" "$WORK/tools/mtmd"
TESTS=$WORK/tools/server/tests

# ---------------------------------------------------------------- 3. openai
PYPATH=$PYDIR
openai_ok() { (cd "$SUITE_DIR" && PYTHONPATH="$1" "$PY" -c 'import openai; openai.OpenAI(api_key="x", base_url="http://127.0.0.1:1/v1").chat.completions' 2>&1); }
OPENAI_STATUS=""
rm -rf "$PYDIR/shims"
if out=$(openai_ok "$PYPATH"); then
    OPENAI_STATUS="importable as installed"
else
    osrc=""
    for cand in "${TANDEM_SUITE_OPENAI_SRC:-}" "$SUITE_DIR/openai-python" /work/.mirror/openai+openai-python/repo; do
        [[ -n "$cand" && -e "$cand" ]] || continue
        if [[ -f "$cand/openai/__init__.py" ]]; then osrc=$cand; break; fi
        if [[ -f "$cand/src/openai/__init__.py" && ! -d "$cand/.git" ]]; then osrc=$cand/src; break; fi
        if git -C "$cand" rev-parse -q --verify "$OPENAI_REF^{commit}" >/dev/null 2>&1; then
            rm -rf "$PYDIR/openai-src"; mkdir -p "$PYDIR/openai-src"
            git -C "$cand" archive "$OPENAI_REF" src/openai | tar -x -C "$PYDIR/openai-src"
            osrc=$PYDIR/openai-src/src; OPENAI_STATUS="from $cand at $OPENAI_REF"; break
        fi
        if [[ -f "$cand/src/openai/__init__.py" ]]; then osrc=$cand/src; break; fi
    done
    if [[ -n "$osrc" ]]; then
        [[ -n "$OPENAI_STATUS" ]] || OPENAI_STATUS="from $osrc"
        PYPATH=$PYDIR:$osrc
        if ! out=$(openai_ok "$PYPATH"); then
            mkdir -p "$PYDIR/shims"
            if ! "$PY" -c 'import typing_extensions as t; [getattr(t, n) for n in ("List", "deprecated", "TypeIs", "TypeAliasType")]' 2>/dev/null; then
                cat > "$PYDIR/shims/typing_extensions.py" <<'EOF'
# Generated by tandem's bench/llama-server-suite.sh: this typing_extensions is older than what the openai
# package needs. Load the real module, then add the few names it lacks.
import os as _os, sys as _sys, typing as _typing
_here = _os.path.dirname(_os.path.abspath(__file__))
_real = None
for _p in _sys.path:
    _c = _os.path.join(_p or ".", "typing_extensions.py")
    if _os.path.abspath(_p or ".") != _here and _os.path.isfile(_c):
        _real = _c
        break
if _real is None:
    raise ImportError("typing_extensions shim: the real typing_extensions.py was not found")
with open(_real) as _f:
    exec(compile(_f.read(), _real, "exec"), globals())
for _n in getattr(_typing, "__all__", []):
    if _n not in globals():
        globals()[_n] = getattr(_typing, _n)
if "TypeIs" not in globals():
    TypeIs = TypeGuard  # noqa: F821  (same at run time, for annotations)
if "TypeAliasType" not in globals():
    class TypeAliasType:  # stand-in: nothing on the suite's path creates one; isinstance() checks stay False
        def __init__(self, name, value, *, type_params=()):
            self.__name__, self.__value__, self.__type_params__ = name, value, type_params
if "deprecated" not in globals():
    import functools as _ft, warnings as _w
    class deprecated:  # minimal PEP 702 decorator
        def __init__(self, message, *, category=DeprecationWarning, stacklevel=1):
            self.message, self.category, self.stacklevel = message, category, stacklevel
        def __call__(self, arg):
            if isinstance(arg, type):
                arg.__deprecated__ = self.message
                return arg
            msg, cat, lvl = self.message, self.category, self.stacklevel
            @_ft.wraps(arg)
            def wrapper(*a, **k):
                if cat is not None:
                    _w.warn(msg, category=cat, stacklevel=lvl + 1)
                return arg(*a, **k)
            wrapper.__deprecated__ = msg
            return wrapper
EOF
                OPENAI_STATUS+="; typing_extensions shim"
            fi
            if ! "$PY" -c 'import jiter' 2>/dev/null; then
                cat > "$PYDIR/shims/jiter.py" <<'EOF'
# Generated by tandem's bench/llama-server-suite.sh: Debian has no jiter. openai imports only jiter.from_json,
# in openai/lib/streaming/chat/_completions.py (partial JSON of the .stream() helper, unused by the suite).
import json as _json
def from_json(data, *args, partial_mode=False, **kwargs):
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8")
    return _json.loads(data)
EOF
                OPENAI_STATUS+="; jiter stub"
            fi
            PYPATH=$PYDIR/shims:$PYDIR:$osrc
            if ! out=$(openai_ok "$PYPATH"); then
                OPENAI_STATUS="NOT importable (needs openai): $(echo "$out" | tail -1)"
                PYPATH=$PYDIR
            fi
        fi
    else
        OPENAI_STATUS="NOT importable (needs openai): no source (set TANDEM_SUITE_OPENAI_SRC to a checkout of github.com/openai/openai-python)"
    fi
fi
note "openai: $OPENAI_STATUS"

# ---------------------------------------------------------------- 4. wrapper ("server binary")
WRAPPER=$SUITE_DIR/bin/llama-server
{
    echo "#!$PY"
    echo "# Generated by tandem's bench/llama-server-suite.sh: the \"llama-server\" that llama.cpp's test suite runs."
    "$PY" -c 'import sys; print("BIN = %r\nMODELS = %r\nLOG = %r\nMODE = %r" % tuple(sys.argv[1:]))' \
        "$TANDEM_BIN" "$SHARED/models" "$RESULTS/launches.jsonl" "$MODE"
} > "$WRAPPER"
cat >> "$WRAPPER" <<'EOF'
import json, os, re, subprocess, sys, time
NUM = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")

def is_value(tok):
    return not tok.startswith("-") or bool(NUM.fullmatch(tok))

def pop_opt(args, names):
    """Remove the first `NAME VALUE` / `NAME=VALUE`; return VALUE or None."""
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                v = args[i + 1]; del args[i:i + 2]; return v
            if a.startswith(n + "="):
                del args[i]; return a[len(n) + 1:]
    return None

def note(msg):
    print("[tandem-suite wrapper] " + msg, file=sys.stderr, flush=True)

orig = sys.argv[1:]
args = list(orig)
mapped = None
repo_i = next((i for i, a in enumerate(args) if a in ("--hf-repo", "-hf", "-hfr") or a.startswith("--hf-repo=")), None)
if repo_i is not None:
    tmp = list(args)
    repo = pop_opt(tmp, ["--hf-repo", "-hf", "-hfr"])
    hf_file = pop_opt(tmp, ["--hf-file", "-hff"])
    cands = []
    if hf_file:
        cands += [os.path.join(MODELS, hf_file), os.path.join(MODELS, os.path.basename(hf_file))]
    elif repo:
        name = repo.split("/")[-1].split(":")[0]
        cands += [os.path.join(MODELS, name + ".gguf")]
        if name.startswith("test-model-"):
            cands += [os.path.join(MODELS, name[len("test-model-"):] + ".gguf")]
    for c in cands:
        if os.path.isfile(c):
            mapped = c
            args = ["-m", c] + tmp
            note(f"mapped --hf-repo {repo}" + (f" --hf-file {hf_file}" if hf_file else "") + f" -> -m {c}")
            break

passed = list(args)   # what tandem would get in strict mode
dropped = []
if MODE == "lenient":
    # Parse-only tries: the model path is replaced by a missing file, so tandem stops right after parsing.
    PARSE = [
        (re.compile(r"unknown argument '([^']*)'"), "unknown argument"),
        (re.compile(r"flag '([^']*)' takes no value"), "takes no value"),
        (re.compile(r"flag '([^']*)' needs a value"), "needs a value"),
        (re.compile(r"flag '([^']*)': "), "value refused"),
        (re.compile(r"unexpected argument '([^']*)'"), "unexpected argument"),
    ]
    for _ in range(64):
        trial = list(args)
        for i, a in enumerate(trial[:-1]):
            if a in ("-m", "--model"):
                trial[i + 1] = "/nonexistent/tandem-suite-parse-check.gguf"
        try:
            r = subprocess.run([BIN, "serve", *trial, "--port", "1"], capture_output=True, text=True, timeout=20)
            err = r.stderr + r.stdout
        except subprocess.TimeoutExpired:
            break
        hit = None
        for rx, kind in PARSE:
            m = rx.search(err)
            if m:
                hit = (kind, m.group(1), err.strip().splitlines()[-1] if err.strip() else "")
                break
        if not hit:
            break
        kind, name, line = hit
        idx = next((i for i, a in enumerate(args) if a == name or (kind != "unexpected argument" and a.startswith(name + "="))), None)
        if idx is None:
            break
        drop = [args[idx]]
        if kind in ("unknown argument", "value refused") and "=" not in args[idx] and idx + 1 < len(args) \
                and (kind == "value refused" or is_value(args[idx + 1])):
            drop.append(args[idx + 1])
        del args[idx:idx + len(drop)]
        dropped.append({"kind": kind, "args": drop, "message": line})
        note(f"lenient: dropped {' '.join(drop)} ({kind})")

try:
    with open(LOG, "a") as f:
        f.write(json.dumps({"time": time.time(), "test": os.environ.get("PYTEST_CURRENT_TEST", ""),
                            "argv": orig, "model": mapped, "passed": passed, "final": ["serve", *args],
                            "dropped": dropped}) + "\n")
except OSError:
    pass
os.execv(BIN, [BIN, "serve", *args])
EOF
chmod +x "$WRAPPER"
"$PY" -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' "$WRAPPER" || die "generated wrapper $WRAPPER is not valid Python"

# ---------------------------------------------------------------- 5. pytest plugin
cat > "$PYDIR/tandem_suite_plugin.py" <<'EOF'
# Generated by tandem's bench/llama-server-suite.sh.
# 1. ServerPreset.load_all() starts every preset once per session to pre-download its model. Nothing can be
#    downloaded here, and a single preset failing there errors every test, so it is a no-op: each test starts
#    (and fails to start, if it must) its own server.
# 2. Every HTTP request made through `requests` or `httpx` (the openai client) is logged, with its status, to
#    $TANDEM_SUITE_REQUEST_LOG, so that missing endpoints (404) can be listed by path.
import json, os, time
from urllib.parse import urlsplit

_LOG = os.environ.get("TANDEM_SUITE_REQUEST_LOG")

def _log(method, url, status, body=None):
    if not _LOG:
        return
    u = urlsplit(str(url))
    rec = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" (")[0], "method": method,
           "path": u.path + ("?" + u.query if u.query else ""), "status": status}
    if body is not None:
        rec["body"] = body[:300]
    try:
        with open(_LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")
    except OSError:
        pass

def pytest_sessionstart(session):
    import utils
    utils.ServerPreset.load_all = staticmethod(lambda: None)
    try:
        import requests
        orig = requests.Session.send
        def send(self, request, **kw):
            try:
                r = orig(self, request, **kw)
            except Exception as e:
                if not str(request.url).endswith("/health"):   # skip the start-up polling
                    _log(request.method, request.url, "exception: " + type(e).__name__)
                raise
            body = None
            if r.status_code >= 400:
                try:
                    body = r.text   # cached by requests: the caller can still read it
                except Exception:
                    pass
            _log(request.method, request.url, r.status_code, body)
            return r
        requests.Session.send = send
    except ImportError:
        pass
    try:
        import httpx
        for cls in (httpx.Client, httpx.AsyncClient):
            o = cls.send
            if cls is httpx.Client:
                def send(self, request, *a, _o=o, **kw):
                    r = _o(self, request, *a, **kw)
                    _log(request.method, request.url, r.status_code)
                    return r
            else:
                async def send(self, request, *a, _o=o, **kw):
                    r = await _o(self, request, *a, **kw)
                    _log(request.method, request.url, r.status_code)
                    return r
            cls.send = send
    except ImportError:
        pass
EOF

# ---------------------------------------------------------------- 6. run
if [[ -n "${TANDEM_SUITE_PORT:-}" ]]; then
    PORT=$TANDEM_SUITE_PORT
else
    PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
PYTEST_ARGS=(-v -rfEs --tb=short -p tandem_suite_plugin -p no:cacheprovider --junitxml="$RESULTS/junit.xml")
if "$PY" -c 'import pytest_timeout' 2>/dev/null; then
    PYTEST_ARGS+=(--timeout="$TIMEOUT" --timeout-method=signal)
else
    note "pytest-timeout not installed: relying on the suite's own timeouts"
fi
if [[ $# -eq 0 ]]; then set -- unit/; fi
: > "$RESULTS/launches.jsonl"
: > "$RESULTS/requests.jsonl"
rm -f "$RESULTS/junit.xml"
{
    echo "# $(date -u '+%F %T UTC')  mode=$MODE  tandem=$TANDEM_BIN"
    echo "# llama.cpp source: $SRC ($SRC_REV)"
    echo "# openai: $OPENAI_STATUS"
    echo "# cd $TESTS && PORT=$PORT LLAMA_SERVER_BIN_PATH=$WRAPPER PYTHONPATH=$PYPATH $PY -m pytest ${PYTEST_ARGS[*]} $*"
} > "$RESULTS/pytest-output.txt"
note "running the suite (mode=$MODE, port $PORT, per-test timeout ${TIMEOUT}s); output: $RESULTS/pytest-output.txt"
start=$(date +%s)
set +e
(cd "$TESTS" && env PORT="$PORT" LLAMA_SERVER_BIN_PATH="$WRAPPER" TANDEM_SUITE_REQUEST_LOG="$RESULTS/requests.jsonl" PYTHONPATH="$PYPATH" PYTHONDONTWRITEBYTECODE=1 \
    "$PY" -m pytest "${PYTEST_ARGS[@]}" "$@") 2>&1 | tee -a "$RESULTS/pytest-output.txt"
rc=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))

# ---------------------------------------------------------------- 7. report
[[ -f "$RESULTS/junit.xml" ]] || die "pytest wrote no junit.xml (exit $rc); see $RESULTS/pytest-output.txt"
"$PY" - "$RESULTS" "$TANDEM_BIN" "$MODE" "$elapsed" "$rc" <<'EOF' | tee "$RESULTS/table.txt"
import collections, json, os, re, subprocess, sys, xml.etree.ElementTree as ET
results, BIN, mode, elapsed, rc = sys.argv[1:6]
root = ET.parse(os.path.join(results, "junit.xml")).getroot()
rows = collections.OrderedDict()
msgs = collections.Counter()
fails = []
for tc in root.iter("testcase"):
    cls, name = tc.get("classname", ""), tc.get("name", "")
    mod = cls if cls else name
    mod = re.sub(r"\.Test[A-Za-z0-9_]*$", "", mod)
    f = mod.replace(".", "/") + ".py" if mod else "?"
    r = rows.setdefault(f, collections.Counter())
    kinds = {c.tag for c in tc}
    if "failure" in kinds: k = "failed"
    elif "error" in kinds: k = "errors"
    elif "skipped" in kinds: k = "skipped"
    else: k = "passed"
    r[k] += 1
    if k in ("failed", "errors"):
        el = tc.find("failure") if k == "failed" else tc.find("error")
        lines = (el.get("message") or "").strip().splitlines() or (el.text or "").strip().splitlines()[-1:] or [""]
        m = re.sub(r"\b\d{4,}\b", "N", lines[0])[:160]
        msgs[m] += 1
        fails.append((f"{f}::{name}", m))
cols = ["passed", "failed", "errors", "skipped"]
w = max([len(f) for f in rows] + [12])
print(f"\nllama.cpp server suite vs tandem serve (mode={mode}, {int(elapsed)//60} min {int(elapsed)%60} s, pytest exit {rc})\n")
print(f"{'file':<{w}}  " + "  ".join(f"{c:>7}" for c in cols))
tot = collections.Counter()
for f, r in sorted(rows.items()):
    tot.update(r)
    print(f"{f:<{w}}  " + "  ".join(f"{r[c]:>7}" for c in cols))
print(f"{'TOTAL':<{w}}  " + "  ".join(f"{tot[c]:>7}" for c in cols))
with open(os.path.join(results, "failures.tsv"), "w") as fh:
    for t, m in fails:
        fh.write(f"{t}\t{m}\n")
print(f"\nmost common failure/error messages (all in {results}/failures.tsv):")
for m, n in msgs.most_common(20):
    print(f"{n:5d}  {m}")

# flag census: every flag the suite passed to the "server binary", and whether `tandem serve` parses it
launches = [json.loads(l) for l in open(os.path.join(results, "launches.jsonl")) if l.strip()]
NUM = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")
seen = collections.OrderedDict()
unmapped = collections.Counter()
for L in launches:
    toks = L["passed"]
    if L.get("model") is None and any(t.startswith("--hf-") for t in toks):
        rf = [toks[i + 1] for i, t in enumerate(toks[:-1]) if t in ("--hf-repo", "--hf-file")]
        unmapped[" ".join(rf)] += 1
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("-") and not NUM.fullmatch(t):
            v = toks[i + 1] if i + 1 < len(toks) and (not toks[i + 1].startswith("-") or NUM.fullmatch(toks[i + 1])) else None
            e = seen.setdefault(t, {"n": 0, "tests": set(), "values": collections.Counter()})
            e["n"] += 1; e["tests"].add(L["test"].split(" (")[0]); e["values"][v] += 1
            i += 2 if v is not None else 1
        else:
            i += 1
def probe(flag, value):
    argv = [BIN, "serve", "-m", "/nonexistent/tandem-suite-parse-check.gguf", "--port", "1", flag] + ([value] if value is not None else [])
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "accepted (probe timed out)"
    err = (r.stderr + r.stdout).strip().splitlines()
    last = err[-1] if err else ""
    if "unknown argument" in last: return "REFUSED: unknown argument"
    if re.search(r"flag '[^']*'", last) or "unexpected argument" in last:
        return "REFUSED value: " + re.sub(r"^tandem serve: error: ", "", last)
    return "accepted"
n_mapped = sum(1 for L in launches if L.get("model"))
print(f"\nmodels: {n_mapped} of {len(launches)} server launches got a shared model (--hf-* mapped to -m);"
      f" models not available here (left as --hf-* flags):")
for k, n in unmapped.most_common():
    print(f"  {n:4d}  {k}")
if seen:
    print(f"\nflags reaching tandem ({len(launches)} server launches, after the model mapping) and `tandem serve`'s verdict (parse only):")
    print(f"{'flag':<24} {'launches':>8} {'tests':>6}  {'values seen':<32} verdict")
    for flag, e in sorted(seen.items(), key=lambda kv: -kv[1]["n"]):
        if flag in ("-m", "--model"):
            continue   # the probe itself passes a (missing) model
        vals = [v for v, _ in e["values"].most_common()]
        verdicts = sorted({probe(flag, v) for v in vals[:6]})
        vs = ",".join("-" if v is None else v for v in vals[:4])[:32]
        print(f"{flag:<24} {e['n']:>8} {len(e['tests']):>6}  {vs:<32} {' | '.join(verdicts)}")
reqs = [json.loads(l) for l in open(os.path.join(results, "requests.jsonl")) if l.strip()]
ep = collections.OrderedDict()
for q in reqs:
    path = re.sub(r"/slots/\d+", "/slots/{id}", q["path"].split("?")[0])
    if "?" in q["path"]:
        path += "?" + "&".join(sorted(kv.split("=")[0] + ("=" + kv.split("=")[1] if kv.startswith("action=") else "")
                                      for kv in q["path"].split("?", 1)[1].split("&")))
    e = ep.setdefault((q["method"], path), {"status": collections.Counter(), "tests": set()})
    e["status"][str(q["status"])] += 1
    e["tests"].add(q["test"])
if ep:
    print(f"\nHTTP requests made by the tests ({len(reqs)}; method path: status x count; tests):")
    for (m, pth), e in sorted(ep.items(), key=lambda kv: (-sum(kv[1]["status"].values()))):
        st = " ".join(f"{k}x{v}" for k, v in e["status"].most_common())
        print(f"  {m:<7} {pth[:48]:<48} {st:<34} {len(e['tests'])}")
drops = collections.Counter()
for L in launches:
    for d in L.get("dropped", []):
        drops[(d["args"][0], d["kind"])] += 1
if drops:
    print("\nlenient mode: flags dropped before starting tandem (flag, reason, launches):")
    for (f, k), n in drops.most_common():
        print(f"  {f:<24} {k:<18} {n}")
EOF
note "full output: $RESULTS/pytest-output.txt; table: $RESULTS/table.txt; launches: $RESULTS/launches.jsonl"
# pytest: 0 all passed, 1 some failed (the expected outcome here); anything else is a real problem
if [[ $rc -le 1 ]]; then exit 0; fi
die "pytest exited with status $rc (interrupted, internal or usage error, or nothing collected)"
