"""slack-router: a worked example of a routing policy that lives outside the ``repro`` package.

The harness finds it by its import path, ``slack_router.policy:SlackRouter`` (``repro run --policy
slack_router.policy:SlackRouter``); see this example's README.md.
"""

from slack_router.policy import SlackRouter

__all__ = ["SlackRouter"]
