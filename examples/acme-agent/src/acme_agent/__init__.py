"""acme-agent: a Nexus agent distribution. Its config is nexus.yaml, beside this file."""
