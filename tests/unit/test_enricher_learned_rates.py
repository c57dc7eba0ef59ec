"""A partition's learned share of a rate limit (or, with no limit met, the rate it was
accepted at) reaches the next partition of the same API and credential in this worker,
and only while it is recent."""

from spark_jobs.enrichers import learned_rates
from spark_jobs.enrichers.config import HttpEnricherConfig
from spark_jobs.enrichers.learned_rates import LearnedRate
from spark_jobs.enrichers.rate_control import RateController
from spark_jobs.enrichers.sender import RequestSender

from .test_enricher_rate_control import FakeClock


def config(url: str, **extra: object) -> HttpEnricherConfig:
    fields = {"url_template": url, "response_fields": {"city": "$.city"}}
    return HttpEnricherConfig.from_dict({**fields, **extra})


async def test_the_next_sender_of_the_same_api_and_credential_starts_at_the_share_found():
    api = config("http://api.test:8080/v1/{id}", secret_headers={"X-Api-Key": "GEO_KEY"})
    first = RequestSender(api, None)
    assert first.rate.slow_start
    first.rate.ceiling_hint = 97.0  # what its last cut found the server accepting
    await first.close()
    same_api = config("http://api.test:8080/v2/{id}", secret_headers={"X-Api-Key": "GEO_KEY"})
    successor = RequestSender(same_api, None)
    assert not successor.rate.slow_start
    assert successor.rate.ceiling_hint == 97.0
    for other in (
        config("http://api.test:8080/v1/{id}", secret_headers={"X-Api-Key": "OTHER_KEY"}),
        config("http://elsewhere.test/v1/{id}", secret_headers={"X-Api-Key": "GEO_KEY"}),
    ):
        assert RequestSender(other, None).rate.slow_start, learned_rates.key_for(other)


async def test_a_given_rate_is_not_learned_nor_overridden():
    api = config("http://given.test/{id}", requests_per_second=40)
    sender = RequestSender(api, None)
    sender.rate.ceiling_hint = 33.0
    await sender.close()
    assert learned_rates.recall(learned_rates.key_for(api)) is None
    assert RequestSender(api, None).rate.rate == 40


def test_a_partition_that_met_no_limit_found_the_rate_it_was_accepted_at():
    """A short partition of a fast API ends still in slow start: what it hands on is no
    share of a limit but the rate the API accepted."""
    clock = FakeClock()
    controller = RateController(clock=clock)
    for _ in range(16):  # 800 calls/s accepted over two seconds, no 429
        for _ in range(100):
            controller.sending()
            controller.accepted()
        clock.now += 0.125
    controller.sending()
    assert controller.slow_start
    found = controller.found()
    assert found is not None and not found.limited and 600 <= found.rate <= 800


def test_its_successor_goes_on_with_slow_start_from_that_rate():
    api = config("http://fast.test/{id}")
    learned_rates.remember(learned_rates.key_for(api), LearnedRate(800.0, limited=False))
    successor = RequestSender(api, None).rate
    assert successor.slow_start and successor.ceiling_hint is None
    assert successor.rate == 800.0  # not START_RATE again


def test_a_learned_rate_is_forgotten_once_its_neighbours_are_likely_gone():
    clock = FakeClock()
    learned_rates.remember("k", LearnedRate(120.0, limited=True), clock)
    clock.now += learned_rates.MAX_AGE_S - 1
    assert learned_rates.recall("k", clock) == LearnedRate(120.0, limited=True)
    clock.now += 2
    assert learned_rates.recall("k", clock) is None
    learned_rates.remember("k", LearnedRate(0.0, limited=True), clock)  # nothing accepted
    assert learned_rates.recall("k", clock) is None
