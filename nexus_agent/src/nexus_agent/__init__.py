"""The `nexus.agent` plugin: an agent loop on the Nexus, and the `nexus chat` / `nexus ask` commands.

The loop talks to a model only through `Nexus.complete` (a provider plugin, such as
nexus-rt-provider-openai, answers it) and runs tools only through `Nexus.invoke`, so every gate,
approval and observer of the Nexus sees what it does. It is a plugin like any other: block it
(`plugins.blocked: [nexus.agent]`) and install another to replace it. See docs/agent.md.

```python
from nexus_core import Nexus

with Nexus.from_config("agent.yaml") as nx:
    agent = nx.plugin("nexus.agent")
    result = agent.run("What does README.md say about installing?")
    print(result.text, result.stop_reason)
```

The plugin is `AgentPlugin`, its settings `Settings` (the schema of its config section is derived
from that class). The public names are listed in `__init__.pyi` and each is imported on first
use (`lazy_loader`, as nexus_core does): `nexus --help` imports this module, and stays fast.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
