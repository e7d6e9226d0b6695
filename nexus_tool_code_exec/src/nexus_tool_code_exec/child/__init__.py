"""The child: the process that runs one script (forked by the zygote, or spawned fresh).

    runtime.py   the runtime a script runs in (`_nexus_rt` inside the child): isolate, stage,
                 run the script, the `call_tool` the generated `tools` module calls
    channel.py   the child's end of its pipes to the host
    output.py    the script's sys.stdout / sys.stderr
    errors.py    how an exception that ended the script is told
    parallel.py  the `parallel` module scripts import

Nothing here imports the host's side (nexus_core's invocation path, the engine): the child
stays small, and what it runs is what the zygote preloaded.
"""
