"""Made inputs with known truth, shared by the tests and the benchmarks: synthetic videos, displays and voices, stores
of known values, Social-IQ-shaped raw sets at scale, the CMU SDK as a reference, the sleeping extractors that stand in
for models in scheduling runs. Nothing here is imported by the pipeline; the tests and bench/ import it, never each
other's fixtures."""
