"""refusal-audit: how language models refuse, and how far refusal monitors can be trusted."""

import warnings

# tqdm.auto, imported by dependencies, warns in every notebook that ipywidgets is absent; the
# compendium's own progress goes to the terminal (refusal_audit.progress), so the warning says nothing
warnings.filterwarnings("ignore", message="IProgress not found")
