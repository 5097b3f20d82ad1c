"""Release packages of a build: the Hugging Face layout, manifest, model card, checksums and a reproducible tarball (torch-free)."""
