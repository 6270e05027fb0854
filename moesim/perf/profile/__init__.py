"""Calibration profiles (calibration/profiles/<gpu>.yaml) for the cost model.

schema      the one declaration of a profile's layout and the validation of every number
            (shared with the writer, moesim.calibration.fit)
reader      read_profile_file, load_profile, Profile (kernel efficiencies, comm parameters)
measured    measured kernel tables (the `measured` cost mode)
work        kernel work / SM fill of a profiled family for a shape (shared with the fit)
provenance  'fitted:h800 DG rows (CV median 5.9%)' and the like
"""

from moesim.perf.profile.reader import Profile, load_profile, read_profile_file
from moesim.perf.profile.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Profile", "load_profile", "read_profile_file"]
