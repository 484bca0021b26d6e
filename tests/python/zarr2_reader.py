"""Run with zarr-python 2: open a store over HTTP with xarray and compare every variable with
the NetCDF source, decode_times both ways. Usage: zarr2_reader.py URL TOKEN SOURCE."""

import sys

import numpy as np
import xarray as xr
import zarr

def comparable(values):
    """Values as assert_array_equal compares them: in an array of strings, xarray's NaN for
    a masked (fill) element becomes None, since NaN != NaN among Python objects."""
    if values.dtype != object:
        return values
    return np.array([None if isinstance(v, float) and np.isnan(v) else v for v in values.ravel()], dtype=object).reshape(values.shape)


url, token, source = sys.argv[1:4]
assert zarr.__version__.startswith("2."), zarr.__version__
options = {"headers": {"Authorization": f"Bearer {token}"}}
for decode_times in (True, False):
    served = xr.open_zarr(url, storage_options=options, consolidated=True, decode_times=decode_times).load()
    with xr.open_dataset(source, engine="netcdf4", decode_times=decode_times) as expected:
        expected = expected.load()
        assert set(served.variables) == set(expected.variables), (set(served.variables), set(expected.variables))
        for name, variable in expected.variables.items():
            np.testing.assert_array_equal(comparable(served[name].values), comparable(variable.values), err_msg=name)
print("zarr", zarr.__version__, "read", len(served.variables), "variables")
