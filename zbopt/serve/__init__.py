"""`zbopt serve`: an interactive schedule explorer in the browser (FastAPI + uvicorn, the
optional extra `serve`). app.py is the web app, api.py what it computes, events.py the step
control's states, jobs.py the background solves, workers.py the processes that run the
comparisons and solves; static/ the page."""
