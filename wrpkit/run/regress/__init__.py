"""`wrp regress`: a folder of captures replayed against their goldens, serially or fanned out."""
