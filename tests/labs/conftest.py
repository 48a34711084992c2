"""Fixtures the lab-check tests share."""

import pytest

import pagedkit


@pytest.fixture(params=["en", "zh-CN"])
def language(request):
    """Each test once in English and once in Chinese (`set_language`); English again after."""
    pagedkit.set_language(request.param)
    try:
        yield request.param
    finally:
        pagedkit.set_language("en")
