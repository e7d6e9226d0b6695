"""The `nexus.tool.web` plugin: the `webfetch` tool, which fetches a web page over http or https and
returns it as Markdown, plain text or HTML, safely by default.

    plugins:
      nexus.tool.web:
        timeout_seconds: 30          # default for the `timeout` argument; covers the whole fetch
        max_timeout_seconds: 120     # the most a call may ask for
        max_bytes: 1048576           # default for `max_bytes`: body bytes read, after decompression
        max_bytes_limit: 10485760    # the most a call may ask for
        max_redirects: 5
        allow_hosts: []              # e.g. [localhost, 10.0.0.0/8, "*.intranet.example"]
        deny_hosts: []               # e.g. ["*.example.com"]; wins over allow_hosts
        allow_ports: [80, 443]       # null: any port

Only public internet addresses are fetched unless `allow_hosts` says otherwise; every redirect is
checked like the first URL, and each connection goes to an address that was checked.

The plugin is `WebPlugin`, its settings `Settings` (the schema of its config section is derived
from that class); `webfetch_tool(settings)` makes the tool for a host that registers it itself.
The public names are listed in `__init__.pyi`, and each is imported on first use
(`lazy_loader`, as nexus_core does): httpx and the HTML libraries load when the tool is made, not
when `nexus --help` imports every plugin's top module. See docs/tool-web.md.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
