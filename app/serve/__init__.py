"""`sharpen serve`: one loaded model for every editor, over HTTP.

    app.py       the ASGI application: route rows (an endpoint's path and its Shape), the key check, JSON errors
    respond.py   the one response loop: a Shape words a run; refusals, failures, time limits, a client leaving, once
    bridge.py    a run on the model's thread, its events awaited by a request (disconnect cancels)
    common.py    the server's state, bounded JSON bodies, the fields the clients' bodies share
    llama.py     llama.cpp's /infill (llama.vim, llama.vscode)
    openai.py    /v1/completions, /v1/fim/completions, /v1/chat/completions (Mercury's `diffusing`), /v1/models
    edits.py     the native /v1/edits: several spans, frames with per-slot state, the change set
    metrics.py   counters for /metrics (Prometheus text)
    main.py      the command line: --model or --backend, --host, --port, the key, limits; the log; uvicorn
    framing.py   broken HTTP framing answered in the JSON error shape (uvicorn's h11 protocol, one method)

Starlette + uvicorn: the ASGI pair most Python servers build on (FastAPI is Starlette inside),
maintained, small, with streaming responses that notice a client leaving. The model itself runs
in threads (core.run.Runner), never on the event loop.
"""
