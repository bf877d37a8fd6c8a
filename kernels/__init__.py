"""Per-step hot path after the forward pass: logits -> proposals, confidences, commits.

`reference` holds the plain-torch functions (used on CPU and as the ground truth); fused
Triton versions sit beside them and are chosen explicitly, never by a failing import.
"""
