"""The hybrid full+SWA radix tree, in two SGLang generations.

``unified`` follows SGLang 0.5.23's ``UnifiedRadixCache`` with FULL and SWA components;
``legacy`` follows the ``SWARadixCache`` of 0.5.9-0.5.15. Both work on page ids and token
counts, never on KV slot tensors.
"""
