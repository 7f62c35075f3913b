"""What an operator runs against a running pipeline: the status report (:mod:`.status`, ``ldpstream status``) and
the live web view with its JSON API (:mod:`.serve`, ``ldpstream serve``; its page in ``web/``)."""
