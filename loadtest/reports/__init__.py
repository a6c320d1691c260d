"""What a person reads: the one report writer every command extends (``writer``), the campaign report and
``tritonkit report`` (``campaign``), its plots and stream figures."""
