"""refusal-audit: how language models refuse, and how far refusal monitors can be trusted."""
