"""A Qwen3 inference engine on cutile_kernels: the model (`model`), its weights from a
Hugging Face checkpoint or random (`weights`), and generation with its command line
(`generate`: ``python -m examples.llm.generate --help``)."""
