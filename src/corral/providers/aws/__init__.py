"""The AWS EC2 provider (``aws``). The class lives in :mod:`corral.providers.aws.provider`
(the registry imports it by that path); this package imports nothing on its own, so that
``corral.providers.aws.boot`` runs on an instance without boto3."""
