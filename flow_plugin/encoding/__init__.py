"""Encoding: sentences -> pooled float32 embeddings (n, d).

``backbone`` loads and freezes a Hugging Face encoder and batches sentences;
``pooling`` turns hidden states into one vector per sentence; ``device`` chooses the
numeric precision; ``cache`` serves each sentence once per backbone key.
Torch is imported here and in ``calibration.flow`` only.
"""
