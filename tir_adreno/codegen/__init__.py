"""PrimFunc -> OpenCL C + launch plan, through TVM's Adreno TIR pipeline (needs TVM)."""
