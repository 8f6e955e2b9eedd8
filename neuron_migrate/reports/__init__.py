"""Every renderer, all working from the records: the effort model (`effort`, `build`), the one jinja
environment and its escaping filters (`templating`), pages for `report` (`render`) and `fleet` (`fleet`),
SARIF for `scan` and `report` (`sarif`), JUnit and Markdown for `check` (`check_summary`), GitHub annotations,
and the rich text views on stderr (`scan_text`, `fix_text`, `trace_text`, `fleet_text`)."""
