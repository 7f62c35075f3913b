"""Read and write the files of Google's RAPPOR tools (docs/math/estimators.md, "Google RAPPOR files").

=================  ======  ==============================================================  =====================
file               header  rows                                                            module
=================  ======  ==============================================================  =====================
``params.csv``     yes     ``k,h,m,p,q,f``, one row                                        :mod:`.params`
``counts.csv``     no      row c: reports of cohort c, then the reports with bit j set     :mod:`.counts`
``map.csv``        no      per candidate: the string, then its m·h rows ``c·k + bit + 1``  :mod:`.maps`
``results.csv``    yes     ``string,estimate,std_error,proportion,…`` (R's ``write.csv``)  :mod:`.results`
``reports.csv``    yes     ``client,cohort,bloom,prr,irr`` (bit strings, MSB first)        :mod:`.reports`
``values.csv``     yes     ``client,cohort,value``: the true values fed to an encoder      :mod:`.values`
=================  ======  ==============================================================  =====================

Associations (``decode-assoc``, Google's ``decode_assoc.R``):

=======================  ======  ==========================================================  ======================
file                     header  rows                                                        module
=======================  ======  ==========================================================  ======================
``rappor-vars.csv``      yes     ``metric, var, var_type, params``: the variables' schema    :mod:`.schema`
reports                  yes     ``client,cohort,<var>...``: bit strings, booleans ``0``/``1``  :mod:`.assoc_reports`
``assoc-results.csv``    yes     ``"<var2>","<var1>","proportion",...``: the joint table     :mod:`.assoc_results`
=======================  ======  ==========================================================  ======================

:mod:`.association` turns them into the joint EM's input and runs it; :mod:`.assoc_simulation` writes such
files from a known joint table with our RAPPOR encoder.

:mod:`.csvio` reads CSV as the tools write it (CRLF, R quoting, BOM) and writes it as they do;
:mod:`.bits` converts the bit strings of ``reports.csv``. Every file we write is read back by Google's
readers (``read.csv`` in R, ``csv.reader`` in Python). All malformed input raises
:class:`~ldpstream.errors.ReportFormatError` (a ``ValueError``) naming the file and line, or
:class:`~ldpstream.errors.ParameterError` for inconsistent parameters.
"""

from ldpstream.interop.rappor.assoc_reports import AssocReports, read_assoc_reports, write_assoc_reports
from ldpstream.interop.rappor.assoc_results import read_assoc_results, write_assoc_metrics, write_assoc_results
from ldpstream.interop.rappor.bits import bits_from_strings, strings_from_bits
from ldpstream.interop.rappor.counts import read_counts, sum_bits, write_counts
from ldpstream.interop.rappor.csvio import PathOrFile, write_lines
from ldpstream.interop.rappor.maps import CandidateMap, create_bool_map, map_rows, read_candidates, read_map, write_map
from ldpstream.interop.rappor.params import PARAMS_HEADER, ParamsFile, read_params, read_params_dir, write_params
from ldpstream.interop.rappor.reports import REPORTS_HEADER, Reports, read_reports, write_reports
from ldpstream.interop.rappor.results import RESULTS_HEADER, read_results, write_results
from ldpstream.interop.rappor.schema import SCHEMA_HEADER, SchemaVariable, find_variable, read_schema, write_schema
from ldpstream.interop.rappor.values import VALUES_HEADER, Values, read_values, write_values

__all__ = [
    "PARAMS_HEADER",
    "REPORTS_HEADER",
    "RESULTS_HEADER",
    "SCHEMA_HEADER",
    "VALUES_HEADER",
    "AssocReports",
    "CandidateMap",
    "ParamsFile",
    "PathOrFile",
    "Reports",
    "SchemaVariable",
    "Values",
    "bits_from_strings",
    "create_bool_map",
    "find_variable",
    "map_rows",
    "read_assoc_reports",
    "read_assoc_results",
    "read_candidates",
    "read_counts",
    "read_map",
    "read_params",
    "read_params_dir",
    "read_reports",
    "read_results",
    "read_schema",
    "read_values",
    "strings_from_bits",
    "sum_bits",
    "write_assoc_metrics",
    "write_assoc_reports",
    "write_assoc_results",
    "write_counts",
    "write_lines",
    "write_map",
    "write_params",
    "write_reports",
    "write_results",
    "write_schema",
    "write_values",
]
