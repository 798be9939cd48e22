"""The staged format: binary COPY, the blob store and S3, staged parts,
load markers and resumable loads."""
