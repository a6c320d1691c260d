"""loadtest.studies.compare.command without a server: bad flags get one line and exit status 2 before any
server starts."""

import pytest

import tritonkit_cli
from tritonkit_errors import ExitStatus


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--b", "instances=2", "--trials", "1"], "--trials 1: an interval needs at least 2 trials"),
        (["--aa", "--b", "instances=2"], "--aa measures A as both arms"),
        ([], "give --b SPEC"),
        (["--b", "instances=zero"], "instances='zero' is not an integer"),
        (["--b", "version=2", "--http-url", "127.0.0.1:1"], "need a local server"),
        (["--b", "model=no_such_model"], "no model 'no_such_model'"),
        (["--b-repository", "/no/such/folder"], "is not a folder"),
        (["--aa", "--repository", "/no/such/folder"], "model 'digits' is not in the repository /no/such/folder"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_status_2(flags, named, capsys):
    status = tritonkit_cli.main(["compare", "digits", "--users", "1", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == ExitStatus.USAGE
    assert len(err) == 1 and named in err[0] and err[0].startswith("compare: error:")


def test_a_bad_number_is_refused_by_the_parser():
    with pytest.raises(SystemExit) as info:
        tritonkit_cli.main(["compare", "digits", "--users", "0", "--b", "instances=2"])
    assert info.value.code == ExitStatus.USAGE
