"""cuda_core."""
