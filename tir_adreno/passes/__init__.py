"""The Relax pass: a CNN's ops -> ``call_tir`` of our texture PrimFuncs (``dispatch_to_textures``)."""
