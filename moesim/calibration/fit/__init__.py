"""Fit measurement CSVs into a calibration profile (calibration/profiles/<gpu>.yaml).

    data     loading / checking the CSV rows, row ids and sources
    peaks    the peaks efficiencies are relative to (hardware spec, or best observed)
    cv       k-fold cross-validation and bounded least squares
    kernels  overlap_v1 kernel fits, peak figures, HBM copies, derived families
    comm     EP all-to-all alpha-beta fits (global and per EP), NCCL ring collectives
    profile  assembly (inheritance from parent profiles, provenance), fit(), write_profile()
    derive   a sibling GPU's profile from a measured one (same SM generation): derive_file()

The profile layout is declared once, in moesim.perf.profile.schema (shared with the reader).
"""

from moesim.calibration.fit.comm import fit_a2a, fit_collective
from moesim.calibration.fit.cv import cross_validate, kfold_indices
from moesim.calibration.fit.data import load_measurements
from moesim.calibration.fit.derive import derive_file, derive_profile
from moesim.calibration.fit.kernels import fit_kernels
from moesim.calibration.fit.peaks import Peaks, derive_peaks
from moesim.calibration.fit.profile import (
    build_profile,
    cv_table,
    dump_profile,
    fit,
    read_profile_dict,
    write_profile,
)

__all__ = [
    "Peaks",
    "build_profile",
    "cross_validate",
    "cv_table",
    "derive_file",
    "derive_peaks",
    "derive_profile",
    "dump_profile",
    "fit",
    "fit_a2a",
    "fit_collective",
    "fit_kernels",
    "kfold_indices",
    "load_measurements",
    "read_profile_dict",
    "write_profile",
]
