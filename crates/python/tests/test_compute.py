"""The command/status API: grep, wc and run answer what `quarry grep/wc/run
--json` print for the same objects; submit, status, wait, result, cancel
and jobs follow a command as `quarry run --detach`, `jobs` and `cancel` do."""

import re

import pytest

import quarry
from conftest import pattern_bytes

MIB = 1 << 20


def answer(result):
    """A command's answer without how it was framed on the way: the
    output streams in pieces whose number (and so the bytes sent to the
    client) depends on how the nodes' answers met in time."""
    return {k: v for k, v in result.items() if k not in ("bytes_sent_to_client", "scanned_per_sent")}


def without_command_number(message):
    """Two runs of one failing command get different numbers."""
    return re.sub(r"command [0-9]+", "command N", message)


@pytest.fixture(scope="module")
def texts(client):
    """A bucket of text objects (one spans several chunks)."""
    name = "py-texts"
    client.make_bucket(name, chunk_size=256 * 1024)
    client.put(name, "logs/big.txt", pattern_bytes(3 * MIB + 17, seed=21))
    client.put(name, "logs/small.txt", b"Quarry stone\nno match here\nquarry again, quarry\n")
    client.put(name, "other.txt", b"gamma ray\n")
    return name


def test_grep_answers_what_the_cli_answers(client, cli, texts):
    for args, kwargs in [
        (["quarry", f"{texts}/logs/small.txt"], {}),
        (["-i", "quarry", f"{texts}/logs/small.txt"], {"ignore_case": True}),
        (["-c", "stone", f"{texts}/logs/big.txt"], {"count": True}),
        (["-E", "-n", "gamma|delta [0-9]+", f"{texts}/logs/*"], {"extended": True}),
        (["-F", "-w", "-o", "quarry", f"{texts}/"], {"fixed": True, "word": True, "only_matching": True}),
        (["-v", "-m", "3", "alpha", f"{texts}/logs/big.txt"], {"invert": True, "max_count": 3}),
        (["-A", "1", "-B", "2", "again", f"{texts}/logs/small.txt"], {"after_context": 1, "before_context": 2}),
    ]:
        flags = [a for a in args if a.startswith("-")]
        operands = [a for a in args if not a.startswith("-") and not a.isdigit()]
        pattern, *targets = operands
        theirs = cli.json("grep", *args)
        ours = client.grep(pattern, *targets, **kwargs)
        assert answer(ours) == answer(theirs), flags
        assert ours["bytes_sent_to_client"] > 0
        assert ours["results"], flags
    small = client.grep("quarry", f"{texts}/logs/small.txt")
    lines = small["results"][0]["output"]["lines"]
    assert [l["text"] for l in lines] == ["quarry again, quarry"]
    assert small["results"][0]["output"]["matching_lines"] == 1


def test_grep_takes_several_patterns(client, cli, texts):
    ours = client.grep(["stone", "again"], f"{texts}/logs/small.txt")
    theirs = cli.json("grep", "-e", "stone", "-e", "again", f"{texts}/logs/small.txt")
    assert answer(ours) == answer(theirs)
    assert ours["results"][0]["output"]["matching_lines"] == 2


def test_wc_answers_what_the_cli_answers(client, cli, texts):
    big = f"{texts}/logs/big.txt"
    assert answer(client.wc(big)) == answer(cli.json("wc", big))
    assert answer(client.wc(f"{texts}/logs/*", f"{texts}/other.txt")) == answer(
        cli.json("wc", f"{texts}/logs/*", f"{texts}/other.txt")
    )
    assert answer(client.wc(big, word="quarry")) == answer(cli.json("wc", "--word", "quarry", big))
    assert answer(client.wc(big, top=3)) == answer(cli.json("wc", "--top", "3", big))
    small = client.wc(f"{texts}/logs/small.txt")["results"][0]["output"]
    assert (small["lines"], small["words"], small["bytes"]) == (3, 8, 48)


def test_run_answers_what_the_cli_answers(client, cli, texts):
    target = f"{texts}/logs/big.txt"
    assert answer(client.run("checksum", target)) == answer(cli.json("run", "checksum", target))
    assert answer(client.run("wordcount", "stone", target)) == answer(
        cli.json("run", "wordcount", "stone", target)
    )


def test_a_submitted_command_is_followed_to_its_result(client, cli, texts):
    target = f"{texts}/logs/big.txt"
    command = client.submit("wc", target)
    assert isinstance(command, int)
    status = client.status(command)
    assert status["id"] == command and status["kernel"] == "wc"
    done = client.wait(command, timeout_ms=60_000)
    assert done["state"] == "done"
    assert done["bytes_done"] == done["bytes_total"] > 0
    assert client.result(command)["results"] == client.run("wc", target)["results"]
    assert command in [j["id"] for j in client.jobs()]
    assert command in [j["id"] for j in cli.json("jobs")]
    # A finished command stays as it ended.
    assert client.cancel(command)["state"] == "done"


def test_commands_fail_with_the_clis_messages(client, cli, texts):
    cli_message = cli.error("cancel", "987654321")
    with pytest.raises(quarry.QuarryError) as raised:
        client.cancel(987654321)
    assert str(raised.value) == cli_message
    with pytest.raises(quarry.InvalidInput) as raised:
        client.run("nosuchkernel", f"{texts}/other.txt")
    assert str(raised.value) == cli.error("run", "nosuchkernel", f"{texts}/other.txt")
    with pytest.raises(quarry.InvalidInput) as raised:
        client.grep("x")
    assert "name what to search" in str(raised.value)
    with pytest.raises(quarry.InvalidInput):
        client.grep("x", "no-slash-here")
    with pytest.raises(quarry.QuarryError) as raised:
        client.wc(f"{texts}/missing.txt")
    assert without_command_number(str(raised.value)) == without_command_number(
        cli.error("wc", f"{texts}/missing.txt")
    )
    assert "missing.txt" in str(raised.value)
