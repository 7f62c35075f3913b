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

:mod:`.csvio` reads CSV as the tools write it (CRLF, R quoting, BOM) and writes it as they do;
:mod:`.bits` converts the bit strings of ``reports.csv``. Every file we write is read back by Google's
readers (``read.csv`` in R, ``csv.reader`` in Python). All malformed input raises
:class:`~ldpstream.errors.ReportFormatError` (a ``ValueError``) naming the file and line, or
:class:`~ldpstream.errors.ParameterError` for inconsistent parameters.
"""

from ldpstream.interop.rappor.bits import bits_from_strings, strings_from_bits
from ldpstream.interop.rappor.counts import read_counts, sum_bits, write_counts
from ldpstream.interop.rappor.csvio import PathOrFile, write_lines
from ldpstream.interop.rappor.maps import CandidateMap, map_rows, read_candidates, read_map, write_map
from ldpstream.interop.rappor.params import PARAMS_HEADER, ParamsFile, read_params, write_params
from ldpstream.interop.rappor.reports import REPORTS_HEADER, Reports, read_reports, write_reports
from ldpstream.interop.rappor.results import RESULTS_HEADER, read_results, write_results
from ldpstream.interop.rappor.values import VALUES_HEADER, Values, read_values, write_values

__all__ = [
    "PARAMS_HEADER",
    "REPORTS_HEADER",
    "RESULTS_HEADER",
    "VALUES_HEADER",
    "CandidateMap",
    "ParamsFile",
    "PathOrFile",
    "Reports",
    "Values",
    "bits_from_strings",
    "map_rows",
    "read_candidates",
    "read_counts",
    "read_map",
    "read_params",
    "read_reports",
    "read_results",
    "read_values",
    "strings_from_bits",
    "sum_bits",
    "write_counts",
    "write_lines",
    "write_map",
    "write_params",
    "write_reports",
    "write_results",
    "write_values",
]
