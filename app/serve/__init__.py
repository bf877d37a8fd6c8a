"""`sharpen serve`: one loaded model for every editor, over HTTP.

    app.py       the ASGI application: routes, the key check, bounded bodies, JSON errors
    bridge.py    a run on the model's thread, its events awaited by a request (disconnect cancels)
    llama.py     llama.cpp's /infill (llama.vim, llama.vscode)
    openai.py    /v1/completions, /v1/fim/completions, /v1/chat/completions (Mercury's `diffusing`), /v1/models
    edits.py     the native /v1/edits: several spans, frames with per-slot state, the change set
    metrics.py   counters for /metrics (Prometheus text)
    main.py      the command line: --model, --host, --port, the key, limits; uvicorn

Starlette + uvicorn: the ASGI pair most Python servers build on (FastAPI is Starlette inside),
maintained, small, with streaming responses that notice a client leaving. The model itself runs
in threads (core.run.Runner), never on the event loop.
"""
