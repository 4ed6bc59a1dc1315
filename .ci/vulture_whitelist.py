# Names vulture (CI, .ci/run "hygiene") reports as unused in src/jitwarden that are used, each with why.
# Reviewed for issue 36; an entry whose name is gone is removed, a new one needs its reason.
# ruff: noqa
# fmt: off

# Record fields: shown in JSON and tables by reflection (KindFacts.to_json walks the dataclass fields)
key_hash  # CupyFacts, JaxFacts
source_saved  # CupyFacts
gencode  # FlashinferFacts
multi_processor_count  # inductor DeviceFacts
triton_key  # inductor InductorFacts
generated_for  # inductor InductorFacts
triton_cache_hash  # inductor InductorFacts
fx_graphs  # inductor InductorFacts
torch_links  # inductor InductorFacts
executable_module  # JaxFacts
compile_time_ms  # JaxFacts
atime  # JaxFacts
accelerator  # TorchExtFacts
flashinfer_version  # VllmFacts
vllm_version  # VllmFacts
graphs  # VllmFacts
artifact_layouts  # VllmFacts
key_has_gpu  # VllmFacts
flashinfer_tune  # VllmFacts
sealed_at  # store/seal.Seal: written into its JSON by model/asjson.fields_json
mangled_names  # formats/cupyentry: a parsed record's field
executable_bytes  # formats/jaxexec: a parsed record's field
differing_bytes  # formats/cubin_compare.AttemptsJudgement: read by rebuild's report and its tests
varying_bytes  # as differing_bytes
_.payload_path  # store/quarantine.Record: read by the tests that restore through it

# Protocols: names a caller outside jitwarden fixes
mtime_ns  # adapters/base._dir_seal: part of the lru_cache key (the seal file's mtime), not read in the body
namespace  # cli/options: argparse.Action.__call__(parser, namespace, values, option_string)
metadata_group  # ops/canary_worker: Triton's compilation listener passes it by keyword
times  # as metadata_group
_.no_wrap  # rich Text/Column attributes set for rich to read
_.overflow  # as no_wrap
_.tell  # store/atomic.AtomicWriter: the file protocol tarfile's writer calls
readable  # formats/oci._DeadlineIO: the raw-IO protocol io.BufferedReader calls
readinto  # as readable
makefile  # formats/oci._DeadlineSocket: the socket protocol http.client calls
on_broken_pipe  # cli/render/console: rich's Console calls it when stdout's reader leaves
_.formatter_class  # cli/options.examples: argparse reads it to format --help
_.__doc__  # runtime/hiding: a namedtuple's docstring, read by help() and the docs
_.__wrapped__  # runtime/guards/inductor._mark: functools' convention, read by inspect and by tests
_.lock_fd  # store/served: holds the lock's fd open for the process's life (closing it would drop the lock)
patch_bundler  # runtime/guards/inductor: named in runtime/guards.HOOKS, looked up when torch imports the module it wraps
patch_codecache  # as patch_bundler
patch_aotcache  # as patch_bundler
patch_cache  # runtime/guards/jax: as patch_bundler, when JAX imports its compilation cache
patch_compiler  # as patch_cache

# Used outside src: by the tests, the benchmarks or the docs generators
reset_driver_evidence  # adapters/cuda_compute: tests reset the per-process driver evidence
query  # env/nvml: tests/unit/env/test_fingerprint.py probes NVML through it
LOCATION_VARS  # env/locations: tests/helpers/sandbox.py unsets every location variable
SHT_NOTE  # formats/elf: the ELF section type the notes reader's docstring names
_.meaning  # model/errors.ExitStatus and model/findings.Code: docs/gen_commands.py writes them into docs/commands.md
meaning  # as _.meaning
BY_NAME  # model/settings: tests/unit/model/test_settings.py checks every row is in it once
CASES  # ops/canary: the canary's battery, listed by the tests
recipe_disagreements  # ops/ptxas_candidates: benchmarks/version_matrix.py and tests/e2e/test_versions.py
summarize  # ops/rebuild: benchmarks/bench_rebuild.py and benchmarks/h200_inductor_rebuild.py
forget  # store/sealkey: tests/unit/store/test_trust.py drops the process's memoized keys between cases
# Named by a row of model/kinds.py and called through it (env/locations.default_base, triton_trees)
triton_root  # the Triton row's root
torch_extensions_root  # the torch-ext row's root
deepgemm_cache_dir  # the DeepGEMM row's root
