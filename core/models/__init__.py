"""The model wing: checkpoint files -> a loaded denoiser, for every family."""
